"""The Console's agent records (``GET /api/v1/fleet/agents`` items, as dicts for now) turned
into the plan's input: one :class:`~fleet_policy.MigrationNode` per node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleet_policy import AgentId, AgentRecord, MigrationNode, NodeName
from flows.hostdatadir.manifests import ClusterFacts

__all__ = ["HOST_TYPE", "by_name", "migration_nodes"]

HOST_TYPE = "host"


def _record(agent: Mapping[str, Any]) -> AgentRecord:
    flags = set(agent.get("flags") or ())
    return AgentRecord(
        agent_id=AgentId(str(agent["id"])),
        agent_type=str(agent["agent_type"]),
        last_seen_age_seconds=agent.get("seconds_since_seen"),
        has_identity_evidence="no_identity_evidence" not in flags,
        revoked=agent.get("status") == "revoked",
        shared_identity="shared_identity" in flags,
    )


def by_name(agents: Iterable[Mapping[str, Any]], agent_type: str) -> dict[str, dict[str, Any]]:
    """The records of ``agent_type``, keyed by agent name (the node's name)."""
    return {str(a["name"]): dict(a) for a in agents if a.get("agent_type") == agent_type}


def migration_nodes(
    cluster: ClusterFacts, agents: Sequence[Mapping[str, Any]]
) -> list[MigrationNode]:
    """One :class:`MigrationNode` per node the DaemonSet runs on. A host agent runs there when
    the Console holds an online ``host`` record under the node's name."""
    nodes = []
    for name in cluster.nodes:
        records = tuple(_record(a) for a in agents if a.get("name") == name)
        host_running = any(
            a.get("name") == name and a.get("agent_type") == HOST_TYPE and a["status"] == "online"
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
