"""The fleet list's status, flags and labels as SQL: the same rules the views apply to one record
(``rollout_policy.identities`` for status, ``presenters.agent_flags`` for flags), written as
conditions a database evaluates, so a page is filtered, counted and cut in the query.

Every instant comes from the rule's owner: ``rollout_policy.identities.online_cutoff`` for online,
``agent_records.REBOUND_FLAG_SECONDS`` for the re-bind flag. ``tests/services/test_fleet_query.py``
checks that each condition selects exactly the records whose computed view says so.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, false, or_, true
from sqlmodel import col, select

from console.models import Agent, AgentEvidence, NatsRevocation
from console.services.agent_records import REBOUND_FLAG_SECONDS
from contracts.vocabulary import AgentFlag, AgentStatus
from rollout_policy import online_cutoff

__all__ = ["flag_condition", "label_condition", "status_condition", "status_ranges"]


def status_condition(
    status: AgentStatus, *, now: datetime, stale_seconds: float
) -> ColumnElement[bool]:
    """``rollout_policy.identities.agent_status`` as a condition: revoked, then released, then
    online (seen at or after the cutoff) or offline."""
    ranges = status_ranges(status, now=now, stale_seconds=stale_seconds)
    return ranges[0] if len(ranges) == 1 else or_(*ranges)


def status_ranges(
    status: AgentStatus, *, now: datetime, stale_seconds: float
) -> list[ColumnElement[bool]]:
    """:func:`status_condition` as conditions whose OR it is, each one range of
    ``ix_agent_env_last_seen`` (environment, last seen, …): offline is "seen before the cutoff"
    and "never seen", which a planner does not combine into one range (SQLite walked every
    record of the environment for it: 15 ms for a count of none at 100,000 agents)."""
    revoked = col(Agent.revoked_at).is_not(None)
    holds = and_(col(Agent.revoked_at).is_(None), col(Agent.nats_public_key).is_not(None))
    cutoff = online_cutoff(now, stale_after_seconds=stale_seconds)
    seen_recently = col(Agent.last_seen_at) >= cutoff
    if status is AgentStatus.REVOKED:
        return [revoked]
    if status is AgentStatus.RELEASED:
        return [and_(col(Agent.revoked_at).is_(None), col(Agent.nats_public_key).is_(None))]
    if status is AgentStatus.ONLINE:
        return [and_(holds, seen_recently)]
    # "seen before the cutoff, or never seen"
    return [
        and_(holds, col(Agent.last_seen_at) < cutoff),
        and_(holds, col(Agent.last_seen_at).is_(None)),
    ]


def flag_condition(flag: AgentFlag, *, now: datetime, stale_seconds: float) -> ColumnElement[bool]:
    """The records ``presenters.agent_flags`` gives ``flag``."""
    if flag is AgentFlag.SHARED_IDENTITY:
        return col(Agent.shared_identity_since).is_not(None)
    if flag is AgentFlag.VERSION_FLAPPING:
        return col(Agent.version_flapping_since).is_not(None)
    if flag is AgentFlag.ENROLLMENT_CONFLICT:
        return col(Agent.last_conflict_at).is_not(None)
    if flag is AgentFlag.CANNOT_SELF_UPDATE:
        return col(Agent.can_self_update).is_(false())
    if flag is AgentFlag.REBOUND:
        return col(Agent.rebound_at) >= now - timedelta(seconds=REBOUND_FLAG_SECONDS)
    if flag is AgentFlag.NO_IDENTITY_EVIDENCE:
        return ~exists(select(AgentEvidence.id).where(AgentEvidence.agent_id == Agent.id))
    if flag is AgentFlag.REFUSED_STILL_CONNECTING:
        # the view's rule: the latest refusal is within the stale window; "any refusal within"
        # is the same set and needs no aggregate
        since = now - timedelta(seconds=stale_seconds)
        return exists(
            select(NatsRevocation.public_key).where(
                NatsRevocation.agent_id == Agent.id,
                col(NatsRevocation.last_refused_at) >= since,
            )
        )
    return true()


def label_condition(key: str, value: str) -> ColumnElement[bool]:
    """The record's label ``key`` is ``value`` (a JSON path both SQLite and PostgreSQL
    evaluate; the key travels as a bound parameter). ``contracts.bounds.parse_labels`` reads
    the filter's ``k=v`` text."""
    labels: Any = col(Agent.labels)
    condition: ColumnElement[bool] = labels[key].as_string() == value
    return condition
