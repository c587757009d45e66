"""Results: every self_update result is judged against the failure criteria the moment it is
recorded, so the stall happens in the Console within one ingest batch of the crossing result;
dispatched targets past their deadline become ``timed_out`` (a lost command is never re-sent).

Results arrive at least once (the agent retries until acknowledged): recording is idempotent on
the command id, and each result gets a :class:`~contracts.messages.ResultAck` the ingester
sends after commit. The rules for late and repeated results, and for when silence counts as a
timeout, are ``rollout_policy.deliveries``."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import update
from sqlmodel import Session, col, select

from console.core.clock import utcnow
from console.models import Rollout, RolloutTarget
from console.services.rollouts.records import _OUTCOME_OF, apply_event, counts, threshold_policy
from contracts.messages import CommandKind, CommandResult, CommandStatus, ResultAck
from contracts.vocabulary import ErrorReason, ResultAckOutcome, TargetStatus
from rollout_policy import (
    ResultCounts,
    ResultFate,
    RolloutState,
    evaluate_thresholds,
    is_overdue,
    result_fate,
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


@dataclass(frozen=True, slots=True)
class RecordedResults:
    """What one batch of results did: the rollouts it halted, and one acknowledgement per
    result in the batch's order (sent to each agent once the batch has committed)."""

    halted: list[str]
    acks: list[ResultAck]


_TRACKED = (CommandStatus.SUCCEEDED, CommandStatus.FAILED, CommandStatus.REJECTED)


def _refused(result: CommandResult, message: str) -> ResultAck:
    return ResultAck(
        command_id=result.command_id,
        outcome=ResultAckOutcome.REFUSED,
        reason=ErrorReason.UNKNOWN_COMMAND,
        message=message,
    )


def _apply(target: RolloutTarget, result: CommandResult, now: datetime) -> None:
    target.status = {
        CommandStatus.SUCCEEDED: TargetStatus.SUCCEEDED,
        CommandStatus.FAILED: TargetStatus.FAILED,
        CommandStatus.REJECTED: TargetStatus.REJECTED,
    }[result.status].value
    target.error = result.error or None  # bounded by the contract, as its column
    target.failure_kind = (
        None
        if result.status is CommandStatus.SUCCEEDED or result.failure_kind is None
        else result.failure_kind.value
    )
    target.new_version = result.detail.get("new_version") or target.new_version
    target.finished_at = now


def record_results(
    session: Session, results: Iterable[tuple[str, CommandResult]], now: datetime | None = None
) -> RecordedResults:
    """Store self_update results (agent id from the subject), idempotent on the command id
    (``rollout_policy.deliveries``: a duplicate is acknowledged, never applied twice; a late
    result replaces ``timed_out``); judge after each."""
    now = now or utcnow()
    halted: list[str] = []
    acks: list[ResultAck] = []
    running: dict[str, tuple[Rollout, ResultCounts | None]] = {}
    batch = list(results)
    tracked = [
        (agent_id, r)
        for agent_id, r in batch
        if r.kind is CommandKind.SELF_UPDATE and r.status in _TRACKED
    ]
    targets = _targets_of(session, [r.command_id for _a, r in tracked])
    for agent_id, result in batch:
        ack = ResultAck(command_id=result.command_id, outcome=ResultAckOutcome.NOT_TRACKED)
        if result.kind is CommandKind.SELF_UPDATE and result.status in _TRACKED:
            target = targets.get(result.command_id)
            ack = _record_one(session, agent_id, result, target, now, running, halted)
        acks.append(ack)
    return RecordedResults(halted=halted, acks=acks)


_IN_CHUNK = 500


def _targets_of(session: Session, command_ids: list[str]) -> dict[str, RolloutTarget]:
    """The batch's targets by command id, in a few ``IN`` queries instead of one per result."""
    found: dict[str, RolloutTarget] = {}
    unique = sorted(set(command_ids))
    for i in range(0, len(unique), _IN_CHUNK):
        rows = session.exec(
            select(RolloutTarget).where(
                col(RolloutTarget.command_id).in_(unique[i : i + _IN_CHUNK])
            )
        ).all()
        found.update({t.command_id: t for t in rows if t.command_id})
    return found


def _record_one(
    session: Session,
    agent_id: str,
    result: CommandResult,
    target: RolloutTarget | None,
    now: datetime,
    running: dict[str, tuple[Rollout, ResultCounts | None]],
    halted: list[str],
) -> ResultAck:
    if target is None or target.agent_id != agent_id:
        # The same words for both: a foreign command's existence is not the sender's business.
        return _refused(result, f"no command {result.command_id} was sent to agent {agent_id}")
    rollout, current = running.get(target.rollout_id) or (
        session.get(Rollout, target.rollout_id),
        None,
    )
    if rollout is None:
        return _refused(result, f"the rollout of command {result.command_id} is gone")
    fate = result_fate(TargetStatus(target.status), RolloutState(rollout.state))
    if fate is ResultFate.NEVER_SENT:
        return _refused(result, f"command {result.command_id} was never dispatched")
    if fate is ResultFate.DUPLICATE:
        return ResultAck(command_id=result.command_id, outcome=ResultAckOutcome.DUPLICATE)
    late = target.status == TargetStatus.TIMED_OUT.value
    _apply(target, result, now)
    session.add(target)
    if late:
        log.info("late result of command %s replaces timed_out", result.command_id)
    if current is None or late:
        session.flush()
        current = counts(session, rollout.id)  # counted from the rows, this one included
    else:
        current = current.record(_OUTCOME_OF[TargetStatus(target.status)])
    running[rollout.id] = (rollout, current)
    if judge(rollout, current, now):
        session.add(rollout)
        halted.append(rollout.id)
    return ResultAck(command_id=result.command_id, outcome=ResultAckOutcome.RECORDED)


def expire_overdue(
    session: Session,
    now: datetime | None = None,
    *,
    listening_since: datetime | None = None,
    grace_seconds: float = 0.0,
) -> list[str]:
    """Dispatched targets past their deadline become ``timed_out`` once the Console has been
    listening for ``grace_seconds`` (``rollout_policy.deliveries.is_overdue``); returns halted
    rollouts. ``listening_since`` defaults to "always" (tests of the plain deadline).

    Each target moves with a conditional update (still ``dispatched``): a result recorded by
    another replica meanwhile is never overwritten, and a second sweep changes nothing."""
    now = now or utcnow()
    listening = listening_since or datetime.min.replace(tzinfo=now.tzinfo)
    past = session.exec(
        select(RolloutTarget.id, RolloutTarget.rollout_id, RolloutTarget.deadline_at).where(
            RolloutTarget.status == TargetStatus.DISPATCHED.value,
            col(RolloutTarget.deadline_at) < now,
        )
    ).all()
    touched: set[str] = set()
    for target_id, rollout_id, deadline in past:
        if deadline is None or not is_overdue(
            deadline=deadline if deadline.tzinfo else deadline.replace(tzinfo=now.tzinfo),
            now=now,
            listening_since=listening,
            grace_seconds=grace_seconds,
        ):
            continue
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
