"""Clusters: registered at onboarding, fed by the leader collector's inventory.

Warnings are computed when read, from what the agents report and what the Console recorded:

- ``sync_interval_drift``: the collector's effective syncInterval differs from the backend's copy
  (``PROXIMA_K8S_SYNC_INTERVAL``) — the seed: "nothing reconciles the two";
- ``slug_mismatch``: a collector enrolled with this cluster's install token reports another slug
  (the seed: "a long name can enroll under a slug Console did not record");
- ``unregistered``: inventory arrived for a slug onboarding never recorded;
- ``inventory_truncated`` / ``inventory_errors``: pods over ``podLimit``, kinds it could not read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlmodel import Session, col, select

from console.core.clock import utcnow
from console.errors import BadRequestError, ConflictError, NotFoundError
from console.models import Agent, Cluster, ClusterInventory, InstallToken
from contracts import parse_duration
from contracts.agent_types import AgentType
from contracts.inventory import InventorySnapshot
from contracts.slugs import is_dns_label, slugify


class ClusterCreate(BaseModel):
    name: str
    slug: str | None = None


class ClusterWarning(BaseModel):
    kind: str
    message: str


class ClusterAgentView(BaseModel):
    id: str
    name: str
    status_seen_at: datetime | None
    leader: bool | None
    reported_slug: str | None
    sync_interval_seconds: float | None
    version: str | None


class ClusterPublic(BaseModel):
    id: str
    slug: str
    name: str
    environment_id: str
    registered: bool
    created_at: datetime
    first_inventory_at: datetime | None
    last_inventory_at: datetime | None
    kubernetes_version: str | None
    sync_interval_seconds: float | None
    backend_sync_interval_seconds: float
    counts: dict[str, int]
    truncated: dict[str, Any]
    errors: list[str]
    agents: list[ClusterAgentView]
    node_agents: int
    warnings: list[ClusterWarning]


def register(
    session: Session, *, client_id: str, environment_id: str, body: ClusterCreate
) -> Cluster:
    slug = body.slug if body.slug else slugify(body.name)
    if not slug:
        raise BadRequestError(
            "no_slug", f"cluster name {body.name!r} has no letter or digit to derive a slug from"
        )
    if not is_dns_label(slug):
        raise BadRequestError(
            "bad_slug",
            f"cluster slug {slug!r} is not a DNS label: use at most 63 lowercase letters, digits "
            "and '-', starting and ending with a letter or digit",
        )
    existing = session.exec(
        select(Cluster).where(Cluster.environment_id == environment_id, Cluster.slug == slug)
    ).first()
    if existing is not None:
        if not existing.registered:
            existing.registered = True
            existing.name = body.name
            session.add(existing)
            return existing
        raise ConflictError("cluster_exists", f"cluster {slug!r} is already registered")
    cluster = Cluster(client_id=client_id, environment_id=environment_id, slug=slug, name=body.name)
    session.add(cluster)
    return cluster


def record_inventory(
    session: Session, *, agent_id: str, snapshot: InventorySnapshot, now: datetime | None = None
) -> Cluster | None:
    now = now or utcnow()
    agent = session.get(Agent, agent_id)
    if agent is None or agent.revoked_at is not None:
        return None
    cluster = session.exec(
        select(Cluster).where(
            Cluster.environment_id == agent.environment_id, Cluster.slug == snapshot.cluster_slug
        )
    ).first()
    if cluster is None:
        cluster = Cluster(
            client_id=agent.client_id,
            environment_id=agent.environment_id,
            slug=snapshot.cluster_slug,
            name=snapshot.cluster_name,
            registered=False,
        )
        session.add(cluster)
        session.flush()
    cluster.first_inventory_at = cluster.first_inventory_at or now
    cluster.last_inventory_at = now
    cluster.last_inventory_agent_id = agent_id
    cluster.reported_name = snapshot.cluster_name
    cluster.kubernetes_version = snapshot.kubernetes_version
    cluster.sync_interval_seconds = snapshot.sync_interval_seconds
    cluster.counts = dict(snapshot.counts)
    cluster.truncated = dict(snapshot.truncated)
    cluster.errors = list(snapshot.errors)
    session.add(cluster)
    inventory = session.get(ClusterInventory, cluster.id)
    objects = {k: [o.model_dump() for o in v] for k, v in snapshot.objects.items()}
    if inventory is None:
        session.add(
            ClusterInventory(
                cluster_id=cluster.id, collected_at=snapshot.collected_at, objects=objects
            )
        )
    else:
        inventory.collected_at = snapshot.collected_at
        inventory.objects = objects
        session.add(inventory)
    return cluster


def load(session: Session, environment_id: str, slug: str) -> Cluster:
    cluster = session.exec(
        select(Cluster).where(Cluster.environment_id == environment_id, Cluster.slug == slug)
    ).first()
    if cluster is None:
        raise NotFoundError("cluster_not_found", f"cluster {slug!r} not found")
    return cluster


def public(session: Session, cluster: Cluster, *, backend_sync_interval: str) -> ClusterPublic:
    backend_sync = parse_duration(backend_sync_interval)
    token_ids = [
        t.id
        for t in session.exec(
            select(InstallToken).where(
                InstallToken.environment_id == cluster.environment_id,
                InstallToken.cluster_slug == cluster.slug,
            )
        )
    ]
    collectors = session.exec(
        select(Agent)
        .where(
            Agent.environment_id == cluster.environment_id,
            Agent.agent_type == AgentType.K8S_CLUSTER_COLLECTOR.value,
            (col(Agent.cluster_slug) == cluster.slug) | col(Agent.install_token_id).in_(token_ids),
        )
        .order_by(col(Agent.name))
    ).all()
    node_agents = len(
        session.exec(
            select(Agent.id).where(
                Agent.environment_id == cluster.environment_id,
                Agent.agent_type == AgentType.K8S_NODE_MONITOR.value,
                (col(Agent.cluster_slug) == cluster.slug)
                | col(Agent.install_token_id).in_(token_ids),
            )
        ).all()
    )
    warnings: list[ClusterWarning] = []
    for a in collectors:
        if (
            a.sync_interval_seconds is not None
            and abs(a.sync_interval_seconds - backend_sync) > 0.5
        ):
            warnings.append(
                ClusterWarning(
                    kind="sync_interval_drift",
                    message=f"collector {a.name} syncs every {a.sync_interval_seconds:g} s but the "
                    f"backend's PROXIMA_K8S_SYNC_INTERVAL is {backend_sync_interval} "
                    f"({backend_sync:g} s): set both to the same value",
                )
            )
        if a.cluster_slug and a.cluster_slug != cluster.slug and a.install_token_id in token_ids:
            warnings.append(
                ClusterWarning(
                    kind="slug_mismatch",
                    message=f"collector {a.name} enrolled with this cluster's install token "
                    f"reports slug {a.cluster_slug!r}, not {cluster.slug!r}: "
                    f"set clusterAgent.clusterSlug={cluster.slug}",
                )
            )
    if not cluster.registered:
        warnings.append(
            ClusterWarning(
                kind="unregistered",
                message=f"inventory arrived for slug {cluster.slug!r}, which onboarding never "
                "recorded: check clusterAgent.clusterSlug",
            )
        )
    for kind, info in cluster.truncated.items():
        warnings.append(
            ClusterWarning(
                kind="inventory_truncated",
                message=f"{kind}: {info.get('total')} in the cluster, {info.get('limit')} reported "
                "(raise clusterAgent.podLimit to see all)",
            )
        )
    for err in cluster.errors:
        warnings.append(ClusterWarning(kind="inventory_errors", message=err))
    return ClusterPublic(
        id=cluster.id,
        slug=cluster.slug,
        name=cluster.name,
        environment_id=cluster.environment_id,
        registered=cluster.registered,
        created_at=cluster.created_at,
        first_inventory_at=cluster.first_inventory_at,
        last_inventory_at=cluster.last_inventory_at,
        kubernetes_version=cluster.kubernetes_version,
        sync_interval_seconds=cluster.sync_interval_seconds,
        backend_sync_interval_seconds=backend_sync,
        counts=cluster.counts,
        truncated=cluster.truncated,
        errors=cluster.errors,
        agents=[
            ClusterAgentView(
                id=a.id,
                name=a.name,
                status_seen_at=a.last_seen_at,
                leader=a.leader,
                reported_slug=a.cluster_slug,
                sync_interval_seconds=a.sync_interval_seconds,
                version=a.version,
            )
            for a in collectors
        ],
        node_agents=node_agents,
        warnings=warnings,
    )
