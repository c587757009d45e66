"""The Console's agent records (``GET /api/v1/fleet/agents`` items, as
:class:`~contracts.views.AgentView`) turned into the plan's input: one
:class:`~rollout_policy.MigrationNode` per node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from contracts.views import AgentView
from contracts.vocabulary import AgentFlag, AgentStatus, AgentType
from flows.hostdatadir.manifests import ClusterFacts
from rollout_policy import AgentId, AgentRecord, MigrationNode, NodeName

__all__ = ["by_name", "migration_nodes"]


def _record(agent: AgentView) -> AgentRecord:
    return AgentRecord(
        agent_id=AgentId(agent.id),
        agent_type=agent.agent_type.value,
        last_seen_age_seconds=agent.seconds_since_seen,
        has_identity_evidence=AgentFlag.NO_IDENTITY_EVIDENCE not in agent.flags,
        revoked=agent.status is AgentStatus.REVOKED,
        shared_identity=AgentFlag.SHARED_IDENTITY in agent.flags,
        released=agent.status is AgentStatus.RELEASED,
    )


def by_name(agents: Iterable[AgentView], agent_type: AgentType) -> dict[str, AgentView]:
    """The records of ``agent_type``, keyed by agent name (the node's name)."""
    return {a.name: a for a in agents if a.agent_type is agent_type}


def migration_nodes(cluster: ClusterFacts, agents: Sequence[AgentView]) -> list[MigrationNode]:
    """One :class:`MigrationNode` per node the DaemonSet runs on. A host agent runs there when
    the Console holds an online ``host`` record under the node's name."""
    nodes = []
    for name in cluster.nodes:
        records = tuple(_record(a) for a in agents if a.name == name)
        host_running = any(
            a.name == name and a.agent_type is AgentType.HOST and a.status is AgentStatus.ONLINE
            for a in agents
        )
        nodes.append(
            MigrationNode(
                name=NodeName(name),
                records=records,
                host_agent_running=host_running,
                host_identity_readable=bool(cluster.host_identity),
            )
        )
    return nodes
