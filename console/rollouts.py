"""Rollouts in the Console: records, idempotent dispatch, results, timeouts, the threshold.

Decisions come from ``fleet_policy``; this module only stores them and enforces them:

- the wave plan and exclusions are decided once, at creation, and stored;
- a command is sent at most once per (rollout, agent): its id is derived from the pair, the
  target is marked dispatched (committed) before the message goes out, and a dispatched target is
  never sent again — a lost message becomes ``timed_out``, never a second execution;
- nothing is dispatched unless the rollout is ``running``;
- every result is judged against the failure criteria the moment it is recorded, so the stall
  happens in the Console within one ingest batch of the crossing result, whatever the flow does.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from console.core.clock import utcnow
from console.errors import BadRequestError, ConflictError, NotFoundError
from console.models import Agent, Rollout, RolloutTarget
from contracts.messages import CommandResult, CommandStatus
from contracts.rollouts import (
    ArtifactRef,
    CriterionSpec,
    ExclusionPublic,
    RolloutCreate,
    RolloutPublic,
    TargetPublic,
    WavePublic,
)
from contracts.vocabulary import TargetStatus
from fleet_policy import (
    AgentId,
    AgentSnapshot,
    EnvironmentId,
    FailureCriterion,
    FailureType,
    IllegalTransitionError,
    Outcome,
    ResultCounts,
    RolloutEvent,
    RolloutPolicyError,
    RolloutState,
    RolloutStatus,
    Selector,
    ThresholdAction,
    ThresholdPolicy,
    evaluate_eligibility,
    evaluate_thresholds,
    parse_version_range,
)
from fleet_policy.waves import FactorGrowth, PercentGrowth, WavePolicy, plan_waves

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


def threshold_policy(criteria: Sequence[dict[str, Any]]) -> ThresholdPolicy:
    return ThresholdPolicy(
        criteria=tuple(
            FailureCriterion(
                failure_type=FailureType(c["failure_type"]),
                threshold_count=c.get("threshold_count"),
                threshold_percent=c.get("threshold_percent"),
                min_executed=c.get("min_executed", 0),
                action=ThresholdAction(c.get("action", "stall")),
            )
            for c in criteria
        )
    )


def _snapshot(agent: Agent, *, stale_seconds: float, now: datetime) -> AgentSnapshot:
    online = (
        agent.nats_public_key is not None
        and agent.last_seen_at is not None
        and (now - agent.last_seen_at).total_seconds() <= stale_seconds
    )
    return AgentSnapshot(
        agent_id=AgentId(agent.id),
        environment_id=EnvironmentId(agent.environment_id),
        agent_type=agent.agent_type,
        version=agent.version,
        online=online,
        labels=dict(agent.labels),
        revoked=agent.revoked_at is not None,
        shared_identity=agent.shared_identity_since is not None,
        can_self_update=agent.can_self_update,
        self_update_blocker=None
        if agent.can_self_update
        else "declared by the agent: read-only program path or container image",
    )


def create_rollout(
    session: Session,
    *,
    client_id: str,
    environment_id: str,
    body: RolloutCreate,
    stale_seconds: float,
    now: datetime | None = None,
) -> Rollout:
    now = now or utcnow()
    try:
        version_range = parse_version_range(body.selector.version_range)
        threshold_policy([c.model_dump() for c in body.criteria])
        growth: PercentGrowth | FactorGrowth = (
            FactorGrowth(body.waves.growth_factor)
            if body.waves.growth_factor is not None
            else PercentGrowth(tuple(body.waves.percentages or (100.0,)))
        )
        wave_policy = WavePolicy(
            canary_size=body.waves.canary_size,
            growth=growth,
            max_wave_size=body.waves.max_wave_size,
        )
    except (RolloutPolicyError, ValueError) as exc:
        raise BadRequestError("invalid_rollout", str(exc)) from exc
    agents = session.exec(
        select(Agent).where(Agent.client_id == client_id, Agent.environment_id == environment_id)
    ).all()
    by_id = {a.id: a for a in agents}
    selector = Selector(
        environment_id=EnvironmentId(environment_id),
        agent_types=frozenset(t.value for t in body.selector.agent_types),
        labels=dict(body.selector.labels),
        version_range=version_range,
        agent_ids=frozenset(AgentId(i) for i in body.selector.agent_ids),
    )
    report = evaluate_eligibility(
        selector,
        [_snapshot(a, stale_seconds=stale_seconds, now=now) for a in agents],
        body.artifact.version,
    )
    rollout_id = uuid.uuid4().hex
    seed = body.seed or rollout_id
    plan = plan_waves(report.eligible, wave_policy, seed)
    rollout = Rollout(
        id=rollout_id,
        client_id=client_id,
        environment_id=environment_id,
        name=body.name,
        target_version=body.artifact.version,
        artifact=body.artifact.model_dump(),
        selector=body.selector.model_dump(mode="json"),
        wave_spec=body.waves.model_dump(),
        criteria=[c.model_dump(mode="json") for c in body.criteria],
        waves=[
            {"index": w.index, "kind": str(w.kind), "size": len(w.agent_ids)} for w in plan.waves
        ],
        exclusions=[
            {
                "agent_id": e.agent_id,
                "agent_name": by_id[e.agent_id].name,
                "reason": str(e.reason),
                "detail": e.detail,
            }
            for e in report.excluded
        ],
        wave_timeout_seconds=body.wave_timeout_seconds,
        seed=seed,
        created_at=now,
    )
    session.add(rollout)
    session.flush()
    for wave in plan.waves:
        for agent_id in wave.agent_ids:
            session.add(
                RolloutTarget(
                    rollout_id=rollout_id,
                    agent_id=agent_id,
                    agent_name=by_id[agent_id].name,
                    wave=wave.index,
                    old_version=by_id[agent_id].version,
                )
            )
    return rollout


def load(session: Session, rollout_id: str) -> Rollout:
    rollout = session.get(Rollout, rollout_id)
    if rollout is None:
        raise NotFoundError("rollout_not_found", f"rollout {rollout_id} not found")
    return rollout


def apply_event(rollout: Rollout, event: RolloutEvent, now: datetime) -> None:
    """Move the rollout through the state machine; an illegal move is a 409."""
    try:
        status = RolloutStatus(state=RolloutState(rollout.state)).apply(event)
    except IllegalTransitionError as exc:
        raise ConflictError(
            "illegal_transition",
            f"rollout {rollout.id} is {rollout.state}: cannot {event.kind}",
        ) from exc
    rollout.state = status.state.value
    rollout.state_reason = event.reason
    if status.state is RolloutState.RUNNING and rollout.started_at is None:
        rollout.started_at = now
    if status.state is RolloutState.STALLED:
        rollout.stalled_at = now
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
class Dispatch:
    rollout_id: str
    wave: int
    to_send: list[tuple[str, str]]  # (agent_id, command_id)
    already_sent: int
    refused: str | None
    artifact: ArtifactRef | None


def dispatch_wave(
    session: Session, *, rollout: Rollout, wave: int, now: datetime | None = None
) -> Dispatch:
    """Mark the wave's undispatched targets as dispatched; return what to send now."""
    now = now or utcnow()
    if wave < 0 or wave >= len(rollout.waves):
        raise BadRequestError("no_such_wave", f"rollout {rollout.id} has no wave {wave}")
    if rollout.state != RolloutState.RUNNING.value:
        return Dispatch(rollout.id, wave, [], 0, f"rollout is {rollout.state}", None)
    earlier_open = session.exec(
        select(RolloutTarget.id).where(
            RolloutTarget.rollout_id == rollout.id,
            col(RolloutTarget.wave) < wave,
            col(RolloutTarget.status).in_([TargetStatus.PENDING, TargetStatus.DISPATCHED]),
        )
    ).first()
    if earlier_open is not None:
        return Dispatch(rollout.id, wave, [], 0, "an earlier wave is not finished", None)
    targets = session.exec(
        select(RolloutTarget).where(
            RolloutTarget.rollout_id == rollout.id, RolloutTarget.wave == wave
        )
    ).all()
    deadline = now + timedelta(seconds=rollout.wave_timeout_seconds)
    to_send: list[tuple[str, str]] = []
    already = 0
    for target in targets:
        if target.status != TargetStatus.PENDING.value:
            already += 1
            continue
        target.status = TargetStatus.DISPATCHED.value
        target.command_id = command_id_for(rollout.id, target.agent_id)
        target.dispatched_at = now
        target.deadline_at = deadline
        session.add(target)
        to_send.append((target.agent_id, target.command_id))
    return Dispatch(
        rollout.id, wave, to_send, already, None, ArtifactRef.model_validate(rollout.artifact)
    )


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
    """Dispatched targets past their deadline become ``timed_out``; returns halted rollouts."""
    now = now or utcnow()
    overdue = session.exec(
        select(RolloutTarget).where(
            RolloutTarget.status == TargetStatus.DISPATCHED.value,
            col(RolloutTarget.deadline_at) < now,
        )
    ).all()
    touched: set[str] = set()
    for target in overdue:
        target.status = TargetStatus.TIMED_OUT.value
        target.error = "no result within the wave timeout"
        target.finished_at = now
        session.add(target)
        touched.add(target.rollout_id)
    session.flush()
    halted = []
    for rollout_id in sorted(touched):
        rollout = session.get(Rollout, rollout_id)
        if rollout is not None and judge(rollout, counts(session, rollout_id), now):
            session.add(rollout)
            halted.append(rollout_id)
    return halted


def resume(session: Session, *, rollout: Rollout, now: datetime | None = None) -> None:
    """Resume a stalled or paused rollout; results so far become the new baseline."""
    now = now or utcnow()
    apply_event(rollout, RolloutEvent.resume(), now)
    current = counts(session, rollout.id)
    rollout.baseline = {
        "succeeded": current.succeeded,
        "failed": current.failed,
        "timed_out": current.timed_out,
        "rejected": current.rejected,
    }
    rollout.threshold = None
    session.add(rollout)


def public(session: Session, rollout: Rollout, *, with_targets: bool = True) -> RolloutPublic:
    targets = session.exec(
        select(RolloutTarget)
        .where(RolloutTarget.rollout_id == rollout.id)
        .order_by(col(RolloutTarget.wave), col(RolloutTarget.agent_name))
    ).all()
    # Targets first, then the rollout's state: a reader between two commits then sees at worst
    # "stalled, wave not done" (wait), never "running, wave done" before the stall it caused.
    session.refresh(rollout)
    per_wave: dict[int, dict[str, int]] = {}
    totals: dict[str, int] = {s.value: 0 for s in TargetStatus}
    for t in targets:
        per_wave.setdefault(t.wave, {s.value: 0 for s in TargetStatus})[t.status] += 1
        totals[t.status] += 1
    waves = []
    for w in rollout.waves:
        c = per_wave.get(w["index"], {s.value: 0 for s in TargetStatus})
        waves.append(
            WavePublic(
                index=w["index"],
                kind=w["kind"],
                size=w["size"],
                counts=c,
                dispatched=c[TargetStatus.PENDING.value] == 0,
                done=c[TargetStatus.PENDING.value] == 0 and c[TargetStatus.DISPATCHED.value] == 0,
            )
        )
    return RolloutPublic(
        id=rollout.id,
        name=rollout.name,
        environment_id=rollout.environment_id,
        target_version=rollout.target_version,
        artifact=ArtifactRef.model_validate(rollout.artifact),
        state=rollout.state,  # type: ignore[arg-type]
        state_reason=rollout.state_reason,
        created_at=rollout.created_at,
        started_at=rollout.started_at,
        finished_at=rollout.finished_at,
        flow_run_id=rollout.flow_run_id,
        wave_timeout_seconds=rollout.wave_timeout_seconds,
        criteria=[CriterionSpec.model_validate(c) for c in rollout.criteria],
        counts=totals,
        waves=waves,
        exclusions=[ExclusionPublic.model_validate(e) for e in rollout.exclusions],
        targets=[
            TargetPublic(
                agent_id=t.agent_id,
                agent_name=t.agent_name,
                wave=t.wave,
                status=TargetStatus(t.status),
                command_id=t.command_id,
                old_version=t.old_version,
                new_version=t.new_version,
                error=t.error,
                dispatched_at=t.dispatched_at,
                finished_at=t.finished_at,
            )
            for t in targets
        ]
        if with_targets
        else None,
        threshold=rollout.threshold,
    )
