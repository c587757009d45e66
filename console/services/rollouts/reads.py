"""Reading rollouts: the list, one rollout with its waves, counts and per-agent results."""

from __future__ import annotations

import logging

from sqlmodel import Session, col, func, select

from console.auth import Principal
from console.models import PLANNED_WAVES, Rollout, RolloutTarget
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
from contracts.vocabulary import CommandFailureKind, DriverLostReason, Scope, TargetStatus

log = logging.getLogger(__name__)


def _counts(session: Session, rollout_id: str) -> dict[int, dict[str, int]]:
    """Per wave, targets per status: counted by the database (``GROUP BY``), no rows loaded."""
    rows = session.exec(
        select(RolloutTarget.wave, RolloutTarget.status, func.count())
        .where(RolloutTarget.rollout_id == rollout_id)
        .group_by(col(RolloutTarget.wave), col(RolloutTarget.status))
    ).all()
    per_wave: dict[int, dict[str, int]] = {}
    for wave, status, n in rows:
        per_wave.setdefault(wave, {s.value: 0 for s in TargetStatus})[status] += n
    return per_wave


def _targets(session: Session, rollout_id: str, wave: int | None) -> list[TargetPublic]:
    query = select(RolloutTarget).where(RolloutTarget.rollout_id == rollout_id)
    if wave is not None:
        query = query.where(RolloutTarget.wave == wave)
    rows = session.exec(
        query.order_by(col(RolloutTarget.wave), col(RolloutTarget.agent_name))
    ).all()
    return [
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
        for t in rows
    ]


def present(
    session: Session, rollout: Rollout, with_targets: bool = True, *, wave: int | None = None
) -> RolloutPublic:
    """The rollout with its counts; with ``with_targets`` its per-agent results (of ``wave``
    only, when given: a wave's table without the other waves' rows)."""
    per_wave = _counts(session, rollout.id)
    targets = _targets(session, rollout.id, wave) if with_targets else None
    # Targets first, then the rollout's state: a reader between two commits then sees at worst
    # "stalled, wave not done" (wait), never "running, wave done" before the stall it caused.
    session.refresh(rollout)
    totals: dict[str, int] = {s.value: 0 for s in TargetStatus}
    for c in per_wave.values():
        for status, n in c.items():
            totals[status] += n
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
        targets=targets,
        threshold=rollout.threshold,
        driver_lost_reason=DriverLostReason(rollout.driver_lost_reason)
        if rollout.driver_lost_reason
        else None,
        driver_lost_at=rollout.driver_lost_at,
        driver_lost_detail=rollout.driver_lost_detail,
        halted_at=rollout.stalled_at,
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
    rt: ServiceRuntime,
    principal: Principal,
    rollout_id: str,
    *,
    targets: bool = True,
    wave: int | None = None,
) -> RolloutPublic:
    """Waves, counts, per-agent results (``targets=False`` leaves the per-agent list out;
    ``wave`` keeps only that wave's)."""

    def work(uow: UnitOfWork) -> RolloutPublic:
        rollout = load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_READ)
        return present(uow.session, rollout, with_targets=targets, wave=wave)

    return await rt.units.run(work)
