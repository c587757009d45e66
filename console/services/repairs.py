"""The startup sweep: stored values over the bounds of ``contracts.bounds`` are cleared.

Consoles before the bounds stored whatever a heartbeat carried (a 900 KB version; on SQLite a
column's length is not enforced). Such a value is cleared once at startup, with an event on the
record saying what was cleared; the agent's next heartbeat writes a bounded value again. The
sweep is idempotent: a clean database costs one read of the columns it checks.
"""

from __future__ import annotations

import logging

from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from console.models import Agent, AgentEvent, Cluster
from contracts.bounds import MAX_IDENTIFIER, MAX_NAME
from contracts.vocabulary.versions import MAX_VERSION_LENGTH
from rollout_policy.versions import try_parse_version

__all__ = ["clear_out_of_bounds"]

log = logging.getLogger(__name__)

MAX_INSTANCE_ID = MAX_IDENTIFIER
MAX_SLUG = MAX_NAME


def clear_out_of_bounds(session: Session) -> dict[str, int]:
    """Clear agents' versions outside the version rule, and over-long instance ids, slugs and
    cluster versions. What was cleared, counted per field."""
    cleared = {"agent.version": 0, "agent.instance_id": 0, "agent.cluster_slug": 0}
    rows = session.exec(
        select(Agent.id, Agent.version).where(col(Agent.version).is_not(None))
    ).all()
    for agent_id, version in rows:
        if try_parse_version(version) is not None:
            continue
        agent = session.get(Agent, agent_id)
        if agent is None:
            continue
        agent.version = None
        cleared["agent.version"] += 1
        session.add(agent)
        session.add(
            AgentEvent(
                agent_id=agent_id,
                kind="version_cleared",
                message="the stored version was not a version (or longer than "
                f"{MAX_VERSION_LENGTH} characters): cleared, the next heartbeat sets it",
                detail={"length": len(version or ""), "start": (version or "")[:32]},
            )
        )
    too_long = session.exec(
        select(Agent).where(
            or_(
                func.length(Agent.instance_id) > MAX_INSTANCE_ID,
                func.length(Agent.cluster_slug) > MAX_SLUG,
            )
        )
    ).all()
    for agent in too_long:
        if agent.instance_id and len(agent.instance_id) > MAX_INSTANCE_ID:
            agent.instance_id = None
            cleared["agent.instance_id"] += 1
        if agent.cluster_slug and len(agent.cluster_slug) > MAX_SLUG:
            agent.cluster_slug = None
            cleared["agent.cluster_slug"] += 1
        session.add(agent)
    clusters = session.exec(
        select(Cluster).where(func.length(Cluster.kubernetes_version) > MAX_VERSION_LENGTH)
    ).all()
    for cluster in clusters:
        cluster.kubernetes_version = None
        session.add(cluster)
    cleared["cluster.kubernetes_version"] = len(clusters)
    if any(cleared.values()):
        log.warning("startup sweep cleared values over their bounds: %s", cleared)
    return cleared
