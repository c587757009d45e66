"""A rollout's records: loading one for a principal, its state machine, result counts, the
stored failure criteria, and the derived command id."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session, select

from console.auth import Principal
from console.errors import ConflictError, NotFoundError
from console.models import Rollout, RolloutTarget
from contracts.rollouts import CriterionSpec
from contracts.vocabulary import ErrorReason, Scope, TargetStatus
from rollout_policy import (
    FailureCriterion,
    IllegalTransitionError,
    Outcome,
    ResultCounts,
    RolloutEvent,
    RolloutState,
    RolloutStatus,
    ThresholdPolicy,
)

log = logging.getLogger(__name__)


_OUTCOME_OF = {
    TargetStatus.SUCCEEDED: Outcome.SUCCEEDED,
    TargetStatus.FAILED: Outcome.FAILED,
    TargetStatus.TIMED_OUT: Outcome.TIMED_OUT,
    TargetStatus.REJECTED: Outcome.REJECTED,
}


def command_id_for(rollout_id: str, agent_id: str) -> str:
    """The same (rollout, agent) always yields the same command id: agents drop repeats."""
    return hashlib.sha256(f"{rollout_id}:{agent_id}".encode()).hexdigest()[:32]


def threshold_policy(criteria: Sequence[CriterionSpec | dict[str, Any]]) -> ThresholdPolicy:
    """The stored (or requested) criteria as the policy the pure core judges with; a part left
    out takes the one default (``contracts.rollouts.CriterionSpec``'s, from the vocabulary)."""
    specs = [
        c if isinstance(c, CriterionSpec) else CriterionSpec.model_validate(c) for c in criteria
    ]
    return ThresholdPolicy(
        criteria=tuple(
            FailureCriterion(
                failure_type=c.failure_type,
                threshold_count=c.threshold_count,
                threshold_percent=c.threshold_percent,
                min_executed=c.min_executed,
                action=c.action,
            )
            for c in specs
        )
    )


def load(session: Session, rollout_id: str) -> Rollout:
    rollout = session.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFoundError(ErrorReason.ROLLOUT_NOT_FOUND, f"rollout {rollout_id} not found")
    return rollout


def load_for(session: Session, rollout_id: str, principal: Principal, scope: Scope) -> Rollout:
    """The rollout, once the principal holds ``scope`` on its client and environment."""
    rollout = load(session, rollout_id)
    principal.require_on(scope, client_id=rollout.client_id, environment_id=rollout.environment_id)
    return rollout


def apply_event(rollout: Rollout, event: RolloutEvent, now: datetime) -> None:
    """Move the rollout through the state machine; an illegal move is a 409."""
    try:
        status = RolloutStatus(state=RolloutState(rollout.state)).apply(event)
    except IllegalTransitionError as exc:
        raise ConflictError(
            ErrorReason.ILLEGAL_TRANSITION,
            f"rollout {rollout.id} is {rollout.state}: cannot {event.kind}",
        ) from exc
    rollout.state = status.state.value
    rollout.state_reason = event.reason
    if status.state is RolloutState.RUNNING and rollout.started_at is None:
        rollout.started_at = now
    if status.state in (RolloutState.STALLED, RolloutState.PAUSED):
        rollout.stalled_at = now  # when it last halted (the flow's pause key: one per halt)
    if status.is_terminal:
        rollout.finished_at = now


def counts(session: Session, rollout_id: str) -> ResultCounts:
    rows = session.exec(
        select(RolloutTarget.status).where(RolloutTarget.rollout_id == rollout_id)
    ).all()
    result = ResultCounts()
    for status in rows:
        outcome = _OUTCOME_OF.get(TargetStatus(status))
        if outcome is not None:
            result = result.record(outcome)
    return result
