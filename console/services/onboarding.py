"""The onboarding checklist: enrollment, first heartbeat, first inventory sync of one cluster.

The one definition of the onboarding gates, computed from the Console's records; the wizard's
checklist and ``GET /api/v1/clusters/{slug}/onboarding`` (what ``enrollment-check`` reads) both
call ``cluster_onboarding``:

- **enrollment** — a ``k8s-cluster-collector`` enrolled with one of this cluster's install tokens
  (or reporting its slug);
- **heartbeat** — one of those collectors has heartbeat over NATS (every replica heartbeats,
  standbys with ``leader: false``; only the leader publishes inventory: docs/chart.md);
- **inventory** — the cluster's ``first_inventory_at`` is set.

A pending gate carries its likely causes and fixes: the chart page's Common Issues rows and what the
records themselves show (a token revoked, a collector reporting another slug, no leader).
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from console.auth import Principal
from console.core.clock import utcnow
from console.models import Agent, Cluster, InstallToken
from console.schemas import OnboardingChecklist
from console.services import clusters
from console.services.presenters import install_token_state
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.views import OnboardingCause as Cause
from contracts.views import OnboardingCheck as Check
from contracts.views import OnboardingStatus
from contracts.vocabulary import AgentType, Scope

__all__ = ["cluster_onboarding", "onboarding_status"]

LOGS = "kubectl -n proxima-system logs statefulset/proxima-agent-cluster-agent"


def _chart_page_enrollment_causes(backend_url: str) -> list[Cause]:
    return [
        Cause(
            issue="Cluster not appearing in Console",
            cause="Collector not enrolling",
            fix=f"Check logs for enrollment errors ({LOGS}), verify install token",
        ),
        Cause(
            issue="Pod stuck in ImagePullBackOff",
            cause="Private registry, no pull secret",
            fix="Add imagePullSecrets",
        ),
        Cause(
            issue="connection refused to backend",
            cause="Wrong backendUrl or network policy",
            fix=f"Verify URL ({backend_url}) and cluster egress rules",
        ),
    ]


def onboarding_status(
    db: Session,
    cluster: Cluster,
    *,
    backend_url: str,
    agent_nats_url: str,
    backend_sync_interval: str,
    now: datetime | None = None,
) -> OnboardingStatus:
    now = now or utcnow()
    tokens = clusters.linked_tokens(db, cluster)
    token_ids = [t.id for t in tokens]
    collectors = sorted(
        clusters.linked_agents(db, cluster, token_ids, AgentType.K8S_CLUSTER_COLLECTOR),
        key=lambda a: a.enrolled_at,
    )
    node_agents = len(clusters.linked_agents(db, cluster, token_ids, AgentType.K8S_NODE_MONITOR))
    usable = [t for t in tokens if install_token_state(t, now) == "active"]

    beating = [a for a in collectors if a.last_heartbeat_at is not None]
    enrollment = _enrollment(cluster, collectors, tokens, usable, node_agents, backend_url, now)
    heartbeat = _heartbeat(collectors, beating, agent_nats_url, now)
    inventory = _inventory(cluster, collectors, beating, backend_sync_interval)

    checks = [enrollment, heartbeat, inventory]
    return OnboardingStatus(
        slug=cluster.slug,
        checks=checks,
        done=all(c.ok for c in checks),
        node_agents=node_agents,
        nodes=cluster.counts.get("nodes") if cluster.first_inventory_at else None,
        tokens_usable=len(usable),
    )


def _enrollment(
    cluster: Cluster,
    collectors: list[Agent],
    tokens: list[InstallToken],
    usable: list[InstallToken],
    node_agents: int,
    backend_url: str,
    now: datetime,
) -> Check:
    if collectors:
        first = collectors[0]
        names = ", ".join(a.name for a in collectors)
        enrollment = Check(
            key="enrollment",
            title="Cluster agent enrolled",
            ok=True,
            detail=f"{names} enrolled as k8s-cluster-collector "
            f"({first.enrolled_at:%Y-%m-%d %H:%M:%S} UTC)",
            causes=[],
        )
    else:
        causes: list[Cause] = []
        if tokens and not usable:
            states = ", ".join(
                sorted({f"{t.prefix}… {install_token_state(t, now)}" for t in tokens})
            )
            causes.append(
                Cause(
                    issue="Install token not usable",
                    cause=f"every install token for {cluster.slug} is spent: {states}",
                    fix="Mint a new install token on this page and run the command again",
                )
            )
        causes += _chart_page_enrollment_causes(backend_url)
        if node_agents:
            causes.append(
                Cause(
                    issue="Node agents enrolled, the cluster agent did not",
                    cause="clusterAgent.enabled=false, or its pod is not scheduled "
                    "(a PersistentVolumeClaim pending without a StorageClass)",
                    fix="kubectl -n proxima-system get pods,pvc",
                )
            )
        enrollment = Check(
            key="enrollment",
            title="Cluster agent enrolled",
            ok=False,
            detail="No k8s-cluster-collector has enrolled with this cluster's install token yet.",
            causes=causes,
        )
    return enrollment


def _heartbeat(
    collectors: list[Agent], beating: list[Agent], agent_nats_url: str, now: datetime
) -> Check:
    if beating:
        latest = max(beating, key=lambda a: a.last_heartbeat_at or now)
        assert latest.last_heartbeat_at is not None
        heartbeat = Check(
            key="heartbeat",
            title="First heartbeat",
            ok=True,
            detail=f"{latest.name} heartbeat "
            f"{(now - latest.last_heartbeat_at).total_seconds():.0f} s ago",
            causes=[],
        )
    elif collectors:
        revoked = [a.name for a in collectors if a.revoked_at is not None]
        causes = [
            Cause(
                issue="Enrolled, but no heartbeat",
                cause=f"Enrollment is HTTP; heartbeats go over NATS, to {agent_nats_url}: the "
                "cluster agent cannot reach it",
                fix=f"{LOGS} | grep nats — allow egress to that host and port",
            )
        ]
        if revoked:
            causes.insert(
                0,
                Cause(
                    issue="Collector revoked",
                    cause=f"{', '.join(revoked)} is revoked: the Console cut its connection",
                    fix="Delete the pod's PVC so it enrolls afresh, or use a new release name",
                ),
            )
        heartbeat = Check(
            key="heartbeat",
            title="First heartbeat",
            ok=False,
            detail="The cluster agent enrolled but has not heartbeat yet.",
            causes=causes,
        )
    else:
        heartbeat = Check(
            key="heartbeat",
            title="First heartbeat",
            ok=False,
            detail="Waits for the cluster agent to enroll.",
            causes=[],
        )
    return heartbeat


def _inventory(
    cluster: Cluster, collectors: list[Agent], beating: list[Agent], backend_sync_interval: str
) -> Check:
    if cluster.first_inventory_at is not None:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(cluster.counts.items()))
        inventory = Check(
            key="inventory",
            title="First inventory sync",
            ok=True,
            detail=f"First sync {cluster.first_inventory_at:%Y-%m-%d %H:%M:%S} UTC"
            + (f": {counts}" if counts else ""),
            causes=[],
        )
    elif beating:
        causes = []
        for a in collectors:
            if a.cluster_slug and a.cluster_slug != cluster.slug:
                causes.append(
                    Cause(
                        issue="Inventory filed under another slug",
                        cause=f"{a.name} reports slug {a.cluster_slug!r}, not {cluster.slug!r}",
                        fix=f"helm upgrade … --set clusterAgent.clusterSlug={cluster.slug}",
                    )
                )
        if all(a.leader is False for a in beating):
            causes.append(
                Cause(
                    issue="No leader",
                    cause="every cluster agent replica is standing by",
                    fix=f"{LOGS} — look for lease errors; check the leader-election Role",
                )
            )
        causes.append(
            Cause(
                issue="No inventory yet",
                cause="The leader syncs when it starts and then every syncInterval; this "
                f"Console expects {backend_sync_interval} (PROXIMA_K8S_SYNC_INTERVAL)",
                fix=f"{LOGS} — look for 'forbidden' or sync errors; check the cluster agent's "
                "ClusterRole",
            )
        )
        inventory = Check(
            key="inventory",
            title="First inventory sync",
            ok=False,
            detail="No inventory has arrived for this slug yet.",
            causes=causes,
        )
    else:
        inventory = Check(
            key="inventory",
            title="First inventory sync",
            ok=False,
            detail="Waits for the first heartbeat.",
            causes=[],
        )
    return inventory


async def cluster_onboarding(
    rt: ServiceRuntime, principal: Principal, slug: str, *, backend_url: str
) -> OnboardingChecklist:
    """The three gates of one cluster, their likely causes, and the cluster's warnings."""
    principal.require(Scope.CLUSTERS_READ)
    settings = rt.settings

    def work(uow: UnitOfWork) -> OnboardingChecklist:
        cluster = clusters.load(uow.session, principal.environment_id, slug)
        status = onboarding_status(
            uow.session,
            cluster,
            backend_url=backend_url,
            agent_nats_url=rt.agent_nats_url,
            backend_sync_interval=settings.k8s_sync_interval,
        )
        public = clusters.public(
            uow.session, cluster, backend_sync_interval=settings.k8s_sync_interval
        )
        return OnboardingChecklist(**dict(status), warnings=public.warnings)

    return await rt.units.run(work)
