"""Reading rollouts: the list, one rollout with its waves, counts and per-agent results."""

from __future__ import annotations

import logging

from sqlmodel import Session, col, select

from console.auth import Principal
from console.models import PLANNED_WAVES, Rollout, RolloutTarget
from console.schemas import Scope
from console.services.rollouts.records import (
    load_for,
)
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.rollouts import (
    ArtifactRef,
    CriterionSpec,
    ExclusionPublic,
    RolloutPublic,
    TargetPublic,
    WavePublic,
)
from contracts.vocabulary import CommandFailureKind, DriverLostReason, TargetStatus

log = logging.getLogger(__name__)


def present(session: Session, rollout: Rollout, with_targets: bool = True) -> RolloutPublic:
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
    for w in PLANNED_WAVES.validate_python(rollout.waves):
        c = per_wave.get(w.index, {s.value: 0 for s in TargetStatus})
        waves.append(
            WavePublic(
                index=w.index,
                kind=w.kind,
                size=w.size,
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
                failure_kind=CommandFailureKind(t.failure_kind) if t.failure_kind else None,
                dispatched_at=t.dispatched_at,
                finished_at=t.finished_at,
            )
            for t in targets
        ]
        if with_targets
        else None,
        threshold=rollout.threshold,
        driver_lost_reason=DriverLostReason(rollout.driver_lost_reason)
        if rollout.driver_lost_reason
        else None,
        driver_lost_at=rollout.driver_lost_at,
        driver_lost_detail=rollout.driver_lost_detail,
    )


async def list_rollouts(
    rt: ServiceRuntime, principal: Principal, *, limit: int
) -> list[RolloutPublic]:
    principal.require(Scope.ROLLOUTS_READ)

    def work(uow: UnitOfWork) -> list[RolloutPublic]:
        rows = uow.session.exec(
            select(Rollout)
            .where(
                Rollout.client_id == principal.client_id,
                Rollout.environment_id == principal.environment_id,
            )
            .order_by(col(Rollout.created_at).desc())
            .limit(limit)
        ).all()
        return [present(uow.session, r, with_targets=False) for r in rows]

    return await rt.units.run(work)


async def get_rollout(
    rt: ServiceRuntime, principal: Principal, rollout_id: str, *, targets: bool = True
) -> RolloutPublic:
    """Waves, counts, per-agent results (``targets=False`` leaves the per-agent list out)."""

    def work(uow: UnitOfWork) -> RolloutPublic:
        rollout = load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_READ)
        return present(uow.session, rollout, with_targets=targets)

    return await rt.units.run(work)
