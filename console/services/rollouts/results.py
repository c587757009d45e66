"""Results: every self_update result is judged against the failure criteria the moment it is
recorded, so the stall happens in the Console within one ingest batch of the crossing result;
dispatched targets past their deadline become ``timed_out`` (a lost message is never re-sent)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import update
from sqlmodel import Session, col, select

from console.core.clock import utcnow
from console.models import Rollout, RolloutTarget
from console.services.rollouts.records import (
    _OUTCOME_OF,
    apply_event,
    counts,
    threshold_policy,
)
from contracts.messages import CommandResult, CommandStatus
from contracts.vocabulary import TargetStatus
from fleet_policy import (
    ResultCounts,
    RolloutState,
    evaluate_thresholds,
)

log = logging.getLogger(__name__)


def _baseline(rollout: Rollout) -> ResultCounts | None:
    return ResultCounts(**rollout.baseline) if rollout.baseline else None


def judge(rollout: Rollout, current: ResultCounts, now: datetime) -> bool:
    """Stall or abort a running rollout whose criteria are crossed; True when it did."""
    if rollout.state != RolloutState.RUNNING.value:
        return False
    decision = evaluate_thresholds(
        threshold_policy(rollout.criteria), current, baseline=_baseline(rollout)
    )
    event = decision.to_event()
    if event is None:
        return False
    trip = decision.trip
    assert trip is not None
    apply_event(rollout, event, now)
    rollout.threshold = {
        "criterion": trip.criterion_index,
        "failure_type": str(trip.criterion.failure_type),
        "measure": str(trip.measure),
        "failures": trip.failures,
        "executed": trip.executed,
        "percent": round(trip.percent, 2),
        "action": str(decision.action),
        "reason": decision.reason,
    }
    log.warning("rollout %s %s: %s", rollout.id, rollout.state, decision.reason)
    return True


def record_results(
    session: Session, results: Iterable[tuple[str, CommandResult]], now: datetime | None = None
) -> list[str]:
    """Store self_update results (agent id from the subject); judge after each. Returns the ids
    of rollouts that stalled or aborted."""
    now = now or utcnow()
    halted: list[str] = []
    running: dict[str, tuple[Rollout, ResultCounts]] = {}
    for agent_id, result in results:
        if result.status not in (
            CommandStatus.SUCCEEDED,
            CommandStatus.FAILED,
            CommandStatus.REJECTED,
        ):
            continue
        target = session.exec(
            select(RolloutTarget).where(RolloutTarget.command_id == result.command_id)
        ).first()
        if target is None or target.agent_id != agent_id:
            continue
        if TargetStatus(target.status).final:
            continue  # a repeated result: already counted
        target.status = {
            CommandStatus.SUCCEEDED: TargetStatus.SUCCEEDED,
            CommandStatus.FAILED: TargetStatus.FAILED,
            CommandStatus.REJECTED: TargetStatus.REJECTED,
        }[result.status].value
        target.error = (result.error or "")[:2048] or None
        target.failure_kind = (
            None
            if result.status is CommandStatus.SUCCEEDED or result.failure_kind is None
            else result.failure_kind.value
        )
        target.new_version = result.detail.get("new_version") or target.new_version
        target.finished_at = now
        session.add(target)
        if target.rollout_id not in running:
            rollout = session.get(Rollout, target.rollout_id)
            if rollout is None:
                continue
            session.flush()
            running[target.rollout_id] = (rollout, counts(session, rollout.id))
        else:
            rollout, current = running[target.rollout_id]
            outcome = _OUTCOME_OF[TargetStatus(target.status)]
            running[target.rollout_id] = (rollout, current.record(outcome))
        rollout, current = running[target.rollout_id]
        if judge(rollout, current, now):
            session.add(rollout)
            halted.append(rollout.id)
    return halted


def expire_overdue(session: Session, now: datetime | None = None) -> list[str]:
    """Dispatched targets past their deadline become ``timed_out``; returns halted rollouts.

    Each target moves with a conditional update (still ``dispatched``): a result recorded by
    another replica meanwhile is never overwritten, and a second sweep changes nothing."""
    now = now or utcnow()
    overdue = session.exec(
        select(RolloutTarget.id, RolloutTarget.rollout_id).where(
            RolloutTarget.status == TargetStatus.DISPATCHED.value,
            col(RolloutTarget.deadline_at) < now,
        )
    ).all()
    touched: set[str] = set()
    for target_id, rollout_id in overdue:
        moved = session.execute(
            update(RolloutTarget)
            .where(
                col(RolloutTarget.id) == target_id,
                col(RolloutTarget.status) == TargetStatus.DISPATCHED.value,
            )
            .values(
                status=TargetStatus.TIMED_OUT.value,
                error="no result within the wave timeout",
                finished_at=now,
            )
        )
        if moved.rowcount:  # type: ignore[attr-defined]
            touched.add(rollout_id)
    session.flush()
    halted = []
    for rollout_id in sorted(touched):
        rollout = session.get(Rollout, rollout_id)
        if rollout is not None and judge(rollout, counts(session, rollout_id), now):
            session.add(rollout)
            halted.append(rollout_id)
    return halted
