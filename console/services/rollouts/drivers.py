"""A rollout's driver: the ``fleet-rollout`` flow run recorded on it (``Rollout.flow_run_id``).

The Console asks Prefect's API for each unfinished rollout's run — on a schedule
(``check_drivers`` from the maintenance sweep) and on every operator decision — and
``rollout_policy.drivers`` says whether the rollout lost it. A lost driver is marked on the record
(``driver_lost_*``: the API view, the web page) and written to the audit log, once: the mark is
a conditional update, so two replicas checking at once mark and log it once. The fix is
``restart_driver``: a fresh ``fleet-rollout`` run that continues where the last one stopped
(dispatch sends nothing twice, see ``dispatch``).

The same check resumes a run that waits for a decision already taken (``rollout_policy.drivers.
resume_owed``: paused while its rollout runs, after a resume that raced the run's pause)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx
from sqlalchemy import update
from sqlmodel import Session, col, select

from console.auth import Principal
from console.core.audit_log import audit
from console.core.clock import utcnow
from console.errors import ConflictError, GatewayTimeoutError
from console.models import Rollout
from console.prefect_api import PrefectApi, PrefectApiError, RunState
from console.services.rollouts.reads import present
from console.services.rollouts.records import load, load_for
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.rollouts import RolloutPublic
from contracts.vocabulary import DriverLostReason, ErrorReason, RolloutState, Scope
from rollout_policy import Decision, EventKind, driver_lost, resume_owed

__all__ = [
    "DriverCheck",
    "check_drivers",
    "mark_lost",
    "restart_driver",
    "resume_run",
    "run_state",
]

log = logging.getLogger(__name__)

_FINISHED = (RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.ABORTED)


@dataclass(frozen=True, slots=True)
class DriverCheck:
    """What Prefect said about one rollout's run, and what the rule made of it."""

    rollout_id: str
    flow_run_id: str
    run: RunState | None
    lost: DriverLostReason | None


async def run_state(api_url: str, flow_run_id: str) -> RunState | None:
    """The run's state; ``GatewayTimeoutError`` when Prefect does not answer (a Prefect outage
    is not a lost driver: nothing is marked)."""
    try:
        return await PrefectApi(api_url).flow_run_state(flow_run_id)
    except (PrefectApiError, httpx.HTTPError) as exc:
        raise GatewayTimeoutError(
            ErrorReason.PREFECT_UNAVAILABLE, f"Prefect's API did not answer: {exc}"
        ) from None


def _detail(check: DriverCheck) -> str:
    if check.run is None:
        return f"flow run {check.flow_run_id} is unknown to Prefect"
    said = f": {check.run.message}" if check.run.message else ""
    return f"flow run {check.flow_run_id} is {check.run.name or check.run.type}{said}"[:512]


def mark_lost(session: Session, check: DriverCheck) -> bool:
    """Mark the rollout's driver lost, unless it finished, got another run, or is marked
    already; True when this call marked it."""
    assert check.lost is not None
    marked = session.execute(
        update(Rollout)
        .where(
            col(Rollout.id) == check.rollout_id,
            col(Rollout.flow_run_id) == check.flow_run_id,
            col(Rollout.driver_lost_at).is_(None),
            col(Rollout.state).not_in([s.value for s in _FINISHED]),
        )
        .values(
            driver_lost_at=utcnow(),
            driver_lost_reason=check.lost.value,
            driver_lost_detail=_detail(check),
        )
    )
    return bool(marked.rowcount)  # type: ignore[attr-defined]


async def _check_one(rt: ServiceRuntime, rollout_id: str, state: str, run: str) -> DriverCheck:
    assert rt.settings.prefect_api_url
    found = await run_state(rt.settings.prefect_api_url, run)
    check = DriverCheck(
        rollout_id, run, found, driver_lost(RolloutState(state), found.type if found else None)
    )
    if check.lost is not None and await rt.units.run(
        lambda uow: mark_lost(uow.session, check), write=True
    ):
        log.warning("rollout %s lost its driver: %s", rollout_id, _detail(check))
        audit(
            "rollout_driver_lost",
            rollout_id=rollout_id,
            flow_run_id=run,
            reason=check.lost.value,
            run_state=found.type if found else None,
        )
    if (
        found is not None
        and resume_owed(RolloutState(state), found.type)
        and await resume_run(rt.settings.prefect_api_url, rollout_id, run, EventKind.RESUME)
    ):
        log.warning(
            "rollout %s was running but its flow run %s waited paused for a decision: resumed",
            rollout_id,
            run,
        )
        audit("rollout_driver_resumed", rollout_id=rollout_id, flow_run_id=run)
    return check


async def resume_run(api_url: str | None, rollout_id: str, run: str, decision: Decision) -> bool:
    """Resume the rollout's paused flow run in Prefect with ``decision``; whether Prefect
    accepted. Best effort: a refusal or a Prefect that does not answer is logged, and the
    driver check (and the paused flow's own polling) comes again."""
    assert api_url
    try:
        answer = await PrefectApi(api_url).resume(run, {"decision": decision.value})
    except Exception:
        log.info("could not resume flow run %s of rollout %s", run, rollout_id, exc_info=True)
        return False
    if not answer.accepted:
        log.info(
            "Prefect did not resume flow run %s of rollout %s: %s", run, rollout_id, answer.detail
        )
    return answer.accepted


async def check_drivers(rt: ServiceRuntime, rollout_ids: list[str] | None = None) -> list[str]:
    """Check the driver of every unfinished rollout (or of ``rollout_ids``) that has a run and
    is not marked lost; returns the rollouts found without one. Prefect down: nothing marked."""
    if not rt.settings.prefect_api_url:
        return []

    def watched(uow: UnitOfWork) -> list[tuple[str, str, str]]:
        query = select(Rollout.id, Rollout.state, Rollout.flow_run_id).where(
            col(Rollout.state).not_in([s.value for s in _FINISHED]),
            col(Rollout.flow_run_id).is_not(None),
            col(Rollout.driver_lost_at).is_(None),
        )
        if rollout_ids is not None:
            query = query.where(col(Rollout.id).in_(rollout_ids))
        return [(i, s, r) for i, s, r in uow.session.exec(query).all() if r]

    lost = []
    for rollout_id, state, run in await rt.units.run(watched):
        try:
            check = await _check_one(rt, rollout_id, state, run)
        except GatewayTimeoutError as exc:
            log.info("driver check of rollout %s skipped: %s", rollout_id, exc)
            continue
        if check.lost is not None:
            lost.append(rollout_id)
    return lost


async def restart_driver(
    rt: ServiceRuntime, principal: Principal, rollout_id: str
) -> RolloutPublic:
    """Start a fresh ``fleet-rollout`` run for an unfinished rollout whose run is gone (or that
    never had one). Refused while the recorded run is alive (409 ``driver_running``)."""
    api_url = rt.settings.prefect_api_url
    rollout = await rt.units.run(
        lambda uow: load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
    )
    if not api_url:
        raise ConflictError(
            ErrorReason.PREFECT_NOT_CONFIGURED,
            "PROXIMA_PREFECT_API_URL is not set: the Console cannot start a flow run",
        )
    if RolloutState(rollout.state) in _FINISHED:
        raise ConflictError(
            ErrorReason.ILLEGAL_TRANSITION, f"rollout {rollout_id} is {rollout.state}: no driver"
        )
    if rollout.flow_run_id:
        check = await _check_one(rt, rollout_id, rollout.state, rollout.flow_run_id)
        if check.lost is None:
            raise ConflictError(
                ErrorReason.DRIVER_RUNNING,
                f"flow run {rollout.flow_run_id} still drives rollout {rollout_id} "
                f"({check.run.type if check.run else '?'}): nothing to restart",
            )
    try:
        new_run = await PrefectApi(api_url).start_deployment(
            rt.settings.rollout_deployment, {"rollout_id": rollout_id}
        )
    except (PrefectApiError, httpx.HTTPError) as exc:
        raise GatewayTimeoutError(
            ErrorReason.PREFECT_UNAVAILABLE, f"could not start a flow run: {exc}"
        ) from None

    def record(uow: UnitOfWork) -> RolloutPublic:
        r = load(uow.session, rollout_id)
        previous = r.flow_run_id
        r.flow_run_id = new_run
        r.driver_lost_at = r.driver_lost_reason = r.driver_lost_detail = None
        uow.session.add(r)
        uow.session.flush()
        audit(
            "rollout_driver_restarted",
            rollout_id=rollout_id,
            flow_run_id=new_run,
            previous_flow_run_id=previous,
            token_id=principal.token_id,
        )
        return present(uow.session, r, with_targets=False)

    return await rt.units.run(record, write=True)
