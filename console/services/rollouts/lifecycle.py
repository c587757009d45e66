"""The operator's and the flow's moves: start, pause, resume, abort, complete."""

from __future__ import annotations

import logging
from datetime import datetime
from uuid import UUID

from sqlmodel import Session

from console.auth import Principal
from console.core.audit_log import audit
from console.core.clock import utcnow
from console.errors import ConflictError
from console.models import Rollout
from console.prefect_api import PrefectApi, RunState
from console.services.rollouts.drivers import (
    check_drivers,
    claim_run,
    resume_run,
    run_id,
    run_state,
)
from console.services.rollouts.reads import present
from console.services.rollouts.records import (
    apply_event,
    counts,
    load_for,
)
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.rollouts import (
    RolloutPublic,
)
from contracts.vocabulary import ErrorReason, RolloutState, Scope
from rollout_policy import (
    EVENT_TARGETS,
    PAUSED_RUN_STATE,
    EventKind,
    RolloutEvent,
)

log = logging.getLogger(__name__)


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


async def transition(
    rt: ServiceRuntime,
    principal: Principal,
    rollout_id: str,
    action: EventKind,
    *,
    reason: str | None = None,
    flow_run_id: UUID | None = None,
) -> RolloutPublic:
    """One move of the state machine (an illegal one is a 409).

    Every operator decision first checks the rollout's driver (``drivers``). A resume of a
    rollout whose flow run is paused in Prefect resumes that run and answers only once Prefect
    accepted (409 ``resume_refused`` otherwise); with the run gone it is refused (409
    ``driver_lost``: restart the driver first). An abort resumes the paused run with ``abort``,
    after commit; the flow polls the state as well. A start records ``flow_run_id`` only as
    ``drivers.claim_run`` allows (409 ``foreign_flow_run`` otherwise)."""
    settings = rt.settings
    recorded: str | None = None
    if action == EventKind.START and flow_run_id is not None:
        claimed = await claim_run(rt, principal, rollout_id, flow_run_id)
        recorded = str(claimed) if claimed else None
    run_state: RunState | None = None
    watched = bool(settings.prefect_api_url) and action != EventKind.START
    if watched:
        await check_drivers(rt, [rollout_id])
        run_state = await _paused_run(rt, principal, rollout_id, action)

    if action in (EventKind.PAUSE, EventKind.ABORT):
        # Who decided is part of the record: the state reason and the audit log carry the
        # token's name (a flow's token for a flow, an operator's for a person).
        said = reason or f"{EVENT_TARGETS[action]} by an operator"
        reason = f"{said} (by {principal.name})"

    def work(uow: UnitOfWork) -> RolloutPublic:
        rollout = load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
        before = rollout.state
        _apply(uow.session, rollout, action, reason, recorded)
        if rollout.state != before:
            audit(
                "rollout_state_changed",
                rollout_id=rollout.id,
                action=action.value,
                state=str(rollout.state),
                reason=reason,
                token_id=principal.token_id,
                token_name=principal.name,
            )
        uow.session.add(rollout)
        uow.session.flush()
        flow_run = rollout.flow_run_id
        if action == EventKind.ABORT and flow_run and watched:
            uow.after_commit(
                lambda: resume_run(settings.prefect_api_url, rollout_id, flow_run, EventKind.ABORT)
            )
        return present(uow.session, rollout, with_targets=False)

    public = await rt.units.run(work, write=True)
    paused_run = run_id(public.flow_run_id)
    if action == EventKind.RESUME and run_state is not None and paused_run is not None:
        assert settings.prefect_api_url
        answer = await PrefectApi(settings.prefect_api_url).resume(
            paused_run, {"decision": EventKind.RESUME.value}
        )
        if not answer.accepted:
            await check_drivers(rt, [rollout_id])
            raise ConflictError(
                ErrorReason.RESUME_REFUSED,
                f"Prefect refused to resume flow run {public.flow_run_id} ({answer.detail}): "
                "the rollout is running in the Console but nothing drives it until the flow "
                "run resumes or the driver is restarted (POST …/restart-driver)",
            )
    return public


async def _paused_run(
    rt: ServiceRuntime, principal: Principal, rollout_id: str, action: EventKind
) -> RunState | None:
    """Before a resume: the run's state when it is paused in Prefect (it must be resumed
    there too); a lost driver refuses the resume. None for other actions, or a live run that
    is not paused (the flow itself asking, or a rollout paused by hand that the flow polls)."""
    rollout = await rt.units.run(
        lambda uow: load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
    )
    if action != EventKind.RESUME or not rollout.flow_run_id:
        return None
    if rollout.driver_lost_reason:
        raise ConflictError(
            ErrorReason.DRIVER_LOST,
            f"rollout {rollout_id} lost its driver ({rollout.driver_lost_detail}): restart it "
            "first (POST …/restart-driver), then resume",
        )
    assert rt.settings.prefect_api_url
    state = await run_state(rt.settings.prefect_api_url, rollout.flow_run_id)
    return state if state is not None and state.type == PAUSED_RUN_STATE else None


def _apply(
    session: Session,
    rollout: Rollout,
    action: EventKind,
    reason: str | None,
    flow_run_id: str | None,
) -> None:
    now = utcnow()
    if action == EventKind.START:
        if flow_run_id and flow_run_id != rollout.flow_run_id:
            rollout.flow_run_id = flow_run_id  # a new run drives it: whatever was lost is not
            rollout.driver_lost_at = rollout.driver_lost_reason = rollout.driver_lost_detail = None
        if rollout.state == RolloutState.PENDING:
            apply_event(rollout, RolloutEvent.start(), now)
    elif action == EventKind.PAUSE:
        apply_event(rollout, RolloutEvent.pause(reason or "paused by an operator"), now)
    elif action == EventKind.RESUME:
        resume(session, rollout=rollout, now=now)
    elif action == EventKind.ABORT:
        if rollout.state != RolloutState.ABORTED:
            apply_event(rollout, RolloutEvent.abort(reason or "aborted by an operator"), now)
    elif action == EventKind.COMPLETE:
        if rollout.state != RolloutState.SUCCEEDED:
            apply_event(rollout, RolloutEvent.complete(), now)
    else:  # stall and fail are the Console's own findings, never asked for
        raise ValueError(f"{action!r} is not a move anyone may ask for")
