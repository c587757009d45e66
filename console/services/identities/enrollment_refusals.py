"""Enrollment refusals (409): the words an operator reads for each ``decide_enrollment``
refusal, and the clash kept on the record that holds the name (its flag and history)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import Session

from console.errors import ConflictError
from console.models import Agent
from console.services.agent_records import add_event
from contracts.vocabulary import ErrorReason
from rollout_policy import EnrollmentClaim, HeldRecord, missing_evidence_kinds

__all__ = ["EnrollmentConflictError", "record_conflict", "refusal"]


class EnrollmentConflictError(ConflictError):
    """409, carrying the record that holds the name so the caller can record the clash."""

    def __init__(self, reason: ErrorReason, message: str, *, agent_id: str) -> None:
        super().__init__(reason, message, agent_id=agent_id)
        self.conflict_reason = reason


def refusal(
    reason: ErrorReason,
    agent: Agent,
    held: HeldRecord,
    quiet_seconds: float,
    presented: EnrollmentClaim,
) -> EnrollmentConflictError:
    """The 409 for a refusal ``decide_enrollment`` made, with words for the operator."""
    missing = missing_evidence_kinds(held.evidence, presented.signals)
    label = f"{agent.agent_type} {agent.name!r}"
    quiet_for = held.seconds_since_seen or 0.0
    message = {
        ErrorReason.AGENT_REVOKED: f"{label} is held by revoked agent {agent.id}; a revoked "
        "identity is never re-bound",
        ErrorReason.NAME_IN_USE: f"{label} is held by agent {agent.id}, seen {quiet_for:.0f} s "
        f"ago (within the {quiet_seconds:g} s quiet window): another live process holds this "
        "identity",
        ErrorReason.NO_IDENTITY_EVIDENCE: f"{label} is held by agent {agent.id}, which carries "
        "no identity evidence to match: free it with "
        "POST /api/v1/fleet/agents/{agentID}/release-identity",
        ErrorReason.IDENTITY_MISMATCH: f"{label} is held by agent {agent.id}; this machine "
        "does not present a matching value of every kind of identity evidence the record "
        f"carries (missing or different: {', '.join(sorted(missing)) or 'none'}; the DMI "
        "product uuid is readable by root only). If this machine is to take the name over (its "
        "evidence changed, or it replaces the old machine), free the record with "
        "POST /api/v1/fleet/agents/{agentID}/release-identity: the next enrollment re-binds it",
    }.get(reason, f"{label} is held by agent {agent.id}")
    return EnrollmentConflictError(reason, message, agent_id=agent.id)


_CONFLICT_STREAK_GAP = timedelta(minutes=5)


def record_conflict(
    session: Session, agent: Agent, conflict: EnrollmentConflictError, now: datetime
) -> None:
    """Flag the record holding the name. One history event per streak of clashes (or when the
    reason changes), so an agent retrying with backoff does not flood the history."""
    same_streak = (
        agent.last_conflict_reason == conflict.reason
        and agent.last_conflict_at is not None
        and now - agent.last_conflict_at < _CONFLICT_STREAK_GAP
    )
    if not same_streak:
        add_event(
            session, agent.id, "enrollment_conflict", conflict.message, reason=conflict.reason
        )
    agent.conflict_count += 1
    agent.last_conflict_at = now
    agent.last_conflict_reason = conflict.reason
    session.add(agent)
