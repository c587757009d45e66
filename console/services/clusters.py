"""Clusters: registered at onboarding, fed by the leader collector's inventory.

Warnings are computed when read, from what the agents report and what the Console recorded:

- ``sync_interval_drift``: the collector's effective syncInterval differs from the backend's copy
  (``PROXIMA_K8S_SYNC_INTERVAL``) — the chart's page: "nothing reconciles the two";
- ``slug_mismatch``: a collector enrolled with this cluster's install token reports another slug
  (the chart's page: "a long name can enroll under a slug Console did not record");
- ``unregistered``: inventory arrived for a slug onboarding never recorded;
- ``inventory_truncated`` / ``inventory_errors``: pods over ``podLimit``, kinds it could not read.

Who may feed a cluster (:func:`inventory_refusal`, :func:`slug_refusal`): only a live
``k8s-cluster-collector``; one enrolled with a cluster-bound install token only for that
token's slug; one enrolled with an environment-wide token only for a slug no cluster-bound
token was minted for. Anything else is refused and logged, never stored.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from console.auth import Principal
from console.core.clock import utcnow
from console.errors import BadRequestError, ConflictError, NotFoundError
from console.models import Agent, Cluster, ClusterInventory, InstallToken
from console.schemas import ClusterCreate
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts import parse_duration
from contracts.inventory import InventoryProblem, InventorySnapshot
from contracts.slugs import is_dns_label, slugify
from contracts.views import ClusterAgentView, ClusterView, ClusterWarningView
from contracts.vocabulary import AgentType, ErrorReason, Scope
from rollout_policy import is_online

log = logging.getLogger(__name__)


def inventory_refusal(session: Session, agent_id: str) -> str | None:
    """Why ``agent_id`` may not send inventory at all, or None: only live collectors may."""
    agent = session.get(Agent, agent_id)
    if agent is None:
        return "no such agent"
    if agent.revoked_at is not None:
        return "the agent is revoked"
    if agent.agent_type != AgentType.K8S_CLUSTER_COLLECTOR.value:
        return (
            f"a {agent.agent_type} agent does not send inventory "
            f"(only {AgentType.K8S_CLUSTER_COLLECTOR.value} agents do)"
        )
    return None


def slug_refusal(session: Session, agent: Agent, slug: str) -> str | None:
    """Why this collector may not feed cluster ``slug``, or None (see the module docstring)."""
    token = session.get(InstallToken, agent.install_token_id) if agent.install_token_id else None
    bound = token.cluster_slug if token is not None else None
    if bound:
        if slug != bound:
            return f"enrolled with an install token of cluster {bound!r}, it sent {slug!r}"
        return None
    claimed = session.exec(
        select(InstallToken.id).where(
            InstallToken.environment_id == agent.environment_id, InstallToken.cluster_slug == slug
        )
    ).first()
    if claimed is not None:
        return (
            f"cluster {slug!r} takes inventory only from collectors enrolled with its own "
            "install tokens"
        )
    return None


def register(
    session: Session, *, client_id: str, environment_id: str, body: ClusterCreate
) -> Cluster:
    slug = body.slug if body.slug else slugify(body.name)
    if not slug:
        raise BadRequestError(
            ErrorReason.NO_SLUG,
            f"cluster name {body.name!r} has no letter or digit to derive a slug from",
        )
    if not is_dns_label(slug):
        raise BadRequestError(
            ErrorReason.BAD_SLUG,
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
        raise ConflictError(ErrorReason.CLUSTER_EXISTS, f"cluster {slug!r} is already registered")
    cluster = Cluster(client_id=client_id, environment_id=environment_id, slug=slug, name=body.name)
    session.add(cluster)
    return cluster


def record_inventory(
    session: Session, *, agent_id: str, snapshot: InventorySnapshot, now: datetime | None = None
) -> Cluster | None:
    now = now or utcnow()
    refusal = inventory_refusal(session, agent_id)
    agent = session.get(Agent, agent_id)
    if refusal is None and agent is not None:
        refusal = slug_refusal(session, agent, snapshot.cluster_slug)
    if refusal is not None or agent is None:
        log.warning("inventory from agent %s refused: %s", agent_id, refusal)
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
    cluster.inventory_problems = [p.model_dump(mode="json") for p in snapshot.problems or []]
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


def record_inventories(session: Session, inventories: dict[str, InventorySnapshot]) -> None:
    """A batch of assembled snapshots, keyed by the agent that sent each."""
    for agent_id, snapshot in inventories.items():
        record_inventory(session, agent_id=agent_id, snapshot=snapshot)


def load(session: Session, environment_id: str, slug: str) -> Cluster:
    cluster = session.exec(
        select(Cluster).where(Cluster.environment_id == environment_id, Cluster.slug == slug)
    ).first()
    if cluster is None:
        raise NotFoundError(ErrorReason.CLUSTER_NOT_FOUND, f"cluster {slug!r} not found")
    return cluster


def linked_tokens(session: Session, cluster: Cluster) -> list[InstallToken]:
    """The install tokens minted for this cluster."""
    return list(
        session.exec(
            select(InstallToken).where(
                InstallToken.environment_id == cluster.environment_id,
                InstallToken.cluster_slug == cluster.slug,
            )
        )
    )


def linked_agents(
    session: Session, cluster: Cluster, token_ids: list[str], agent_type: AgentType
) -> list[Agent]:
    """Agents of a type that belong to the cluster: enrolled with one of its install tokens,
    or reporting its slug."""
    return list(
        session.exec(
            select(Agent)
            .where(
                Agent.environment_id == cluster.environment_id,
                Agent.agent_type == agent_type.value,
                (col(Agent.cluster_slug) == cluster.slug)
                | col(Agent.install_token_id).in_(token_ids),
            )
            .order_by(col(Agent.name))
        ).all()
    )


def _warnings(
    cluster: Cluster, collectors: list[Agent], token_ids: list[str], backend_sync_interval: str
) -> list[ClusterWarningView]:
    backend_sync = parse_duration(backend_sync_interval)
    warnings: list[ClusterWarningView] = []
    for a in collectors:
        if (
            a.sync_interval_seconds is not None
            and abs(a.sync_interval_seconds - backend_sync) > 0.5
        ):
            warnings.append(
                ClusterWarningView(
                    kind="sync_interval_drift",
                    message=f"collector {a.name} syncs every {a.sync_interval_seconds:g} s but the "
                    f"backend's PROXIMA_K8S_SYNC_INTERVAL is {backend_sync_interval} "
                    f"({backend_sync:g} s): set both to the same value",
                )
            )
        if a.cluster_slug and a.cluster_slug != cluster.slug and a.install_token_id in token_ids:
            warnings.append(
                ClusterWarningView(
                    kind="slug_mismatch",
                    message=f"collector {a.name} enrolled with this cluster's install token "
                    f"reports slug {a.cluster_slug!r}, not {cluster.slug!r}: "
                    f"set clusterAgent.clusterSlug={cluster.slug}",
                )
            )
    if not cluster.registered:
        warnings.append(
            ClusterWarningView(
                kind="unregistered",
                message=f"inventory arrived for slug {cluster.slug!r}, which onboarding never "
                "recorded: check clusterAgent.clusterSlug",
            )
        )
    for kind, info in cluster.truncated.items():
        warnings.append(
            ClusterWarningView(
                kind="inventory_truncated",
                message=f"{kind}: {info.get('total')} in the cluster, {info.get('limit')} reported "
                "(raise clusterAgent.podLimit to see all)",
            )
        )
    for err in cluster.errors:
        warnings.append(ClusterWarningView(kind="inventory_errors", message=err))
    return warnings


def public(session: Session, cluster: Cluster, *, backend_sync_interval: str) -> ClusterView:
    token_ids = [t.id for t in linked_tokens(session, cluster)]
    collectors = linked_agents(session, cluster, token_ids, AgentType.K8S_CLUSTER_COLLECTOR)
    node_agents = len(linked_agents(session, cluster, token_ids, AgentType.K8S_NODE_MONITOR))
    return ClusterView(
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
        counts=cluster.counts,
        truncated=cluster.truncated,
        errors=cluster.errors,
        inventory_problems=[InventoryProblem.model_validate(p) for p in cluster.inventory_problems],
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
        warnings=_warnings(cluster, collectors, token_ids, backend_sync_interval),
        backend_sync_interval_seconds=parse_duration(backend_sync_interval),
    )


def collectors_seen_recently(
    cluster: ClusterView, *, stale_seconds: float, now: datetime
) -> dict[str, bool]:
    """Per collector of the cluster's view: seen within the stale timeout (the cluster page's
    online dot)."""
    return {
        a.id: is_online(
            (now - a.status_seen_at).total_seconds() if a.status_seen_at else None,
            stale_after_seconds=stale_seconds,
        )
        for a in cluster.agents
    }


def _present(rt: ServiceRuntime, session: Session, cluster: Cluster) -> ClusterView:
    return public(session, cluster, backend_sync_interval=rt.settings.k8s_sync_interval)


async def register_cluster(
    rt: ServiceRuntime, principal: Principal, body: ClusterCreate
) -> ClusterView:
    """Record a cluster (slug derived from the name like the chart does, unless given)."""
    principal.require(Scope.CLUSTERS_WRITE)

    def work(uow: UnitOfWork) -> ClusterView:
        cluster = register(
            uow.session,
            client_id=principal.client_id,
            environment_id=principal.environment_id,
            body=body,
        )
        uow.session.flush()
        return _present(rt, uow.session, cluster)

    return await rt.units.run(work, write=True)


async def list_clusters(rt: ServiceRuntime, principal: Principal) -> list[ClusterView]:
    principal.require(Scope.CLUSTERS_READ)

    def work(uow: UnitOfWork) -> list[ClusterView]:
        rows = uow.session.exec(
            select(Cluster)
            .where(
                Cluster.environment_id == principal.environment_id,
                Cluster.client_id == principal.client_id,
            )
            .order_by(col(Cluster.slug))
        ).all()
        return [_present(rt, uow.session, c) for c in rows]

    return await rt.units.run(work)


async def get_cluster(rt: ServiceRuntime, principal: Principal, slug: str) -> ClusterView:
    principal.require(Scope.CLUSTERS_READ)
    return await rt.units.run(
        lambda uow: _present(rt, uow.session, load(uow.session, principal.environment_id, slug))
    )


async def inventory(
    rt: ServiceRuntime,
    principal: Principal,
    slug: str,
    *,
    kind: str | None,
    namespace: str | None,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    """The latest snapshot: counts per kind, and objects (one kind at a time, paginated)."""
    principal.require(Scope.CLUSTERS_READ)

    def work(uow: UnitOfWork) -> tuple[Cluster, ClusterInventory | None]:
        cluster = load(uow.session, principal.environment_id, slug)
        return cluster, uow.session.get(ClusterInventory, cluster.id)

    cluster, inv = await rt.units.run(work)
    if inv is None:
        return {"slug": slug, "collected_at": None, "counts": {}, "items": [], "total": 0}
    body: dict[str, Any] = {
        "slug": slug,
        "collected_at": inv.collected_at,
        "counts": cluster.counts,
        "truncated": cluster.truncated,
        "errors": cluster.errors,
        "inventory_problems": cluster.inventory_problems,
        "kinds": sorted(inv.objects),
    }
    if kind:
        items = inv.objects.get(kind, [])
        if namespace:
            items = [o for o in items if o.get("namespace") == namespace]
        body.update(
            kind=kind,
            total=len(items),
            items=items[offset : offset + limit],
            limit=limit,
            offset=offset,
        )
    return body
