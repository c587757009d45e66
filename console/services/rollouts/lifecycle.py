"""The operator's and the flow's moves: start, pause, resume, abort, complete."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlmodel import Session

from console.auth import Principal
from console.core.clock import utcnow
from console.models import Rollout
from console.prefect_api import PrefectApi
from console.schemas import Scope
from console.services.rollouts.reads import present
from console.services.rollouts.records import (
    apply_event,
    counts,
    load_for,
)
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.rollouts import (
    Decision,
    RolloutPublic,
)
from contracts.vocabulary import RolloutState
from fleet_policy import (
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
    action: str,
    *,
    reason: str | None = None,
    flow_run_id: str | None = None,
) -> RolloutPublic:
    """One move of the state machine (an illegal one is a 409). An operator's resume or abort
    also resumes the paused flow run, after commit; the flow polls the state as well."""
    settings = rt.settings

    def work(uow: UnitOfWork) -> RolloutPublic:
        rollout = load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
        _apply(uow.session, rollout, action, reason, flow_run_id)
        uow.session.add(rollout)
        uow.session.flush()
        flow_run = rollout.flow_run_id
        if action in ("resume", "abort") and flow_run and settings.prefect_api_url:
            if not flow_run_id:
                decision = Decision.RESUME if action == "resume" else Decision.ABORT
                uow.after_commit(lambda: _resume_flow(settings.prefect_api_url, flow_run, decision))
        return present(uow.session, rollout, with_targets=False)

    return await rt.units.run(work, write=True)


def _apply(
    session: Session, rollout: Rollout, action: str, reason: str | None, flow_run_id: str | None
) -> None:
    now = utcnow()
    if action == "start":
        if flow_run_id:
            rollout.flow_run_id = flow_run_id
        if rollout.state == RolloutState.PENDING:
            apply_event(rollout, RolloutEvent.start(), now)
    elif action == "pause":
        apply_event(rollout, RolloutEvent.pause(reason or "paused by an operator"), now)
    elif action == "resume":
        resume(session, rollout=rollout, now=now)
    elif action == "abort":
        if rollout.state != "aborted":
            apply_event(rollout, RolloutEvent.abort(reason or "aborted by an operator"), now)
    elif action == "complete":
        if rollout.state != "succeeded":
            apply_event(rollout, RolloutEvent.complete(), now)


async def _resume_flow(prefect_api_url: str | None, flow_run: str, decision: Decision) -> None:
    assert prefect_api_url
    try:
        await PrefectApi(prefect_api_url).resume(flow_run, {"decision": decision.value})
    except Exception:  # the flow also polls the Console's state
        log.info("could not resume flow run %s in Prefect", flow_run, exc_info=True)
