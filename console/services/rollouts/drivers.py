"""A rollout's driver: the ``fleet-rollout`` flow run recorded on it (``Rollout.flow_run_id``).

The Console asks Prefect's API for each unfinished rollout's run — on a schedule
(``check_drivers`` from the maintenance sweep) and on every operator decision — and
``rollout_policy.drivers`` says whether the rollout lost it. A lost driver is marked on the record
(``driver_lost_*``: the API view, the web page) and written to the audit log, once: the mark is
a conditional update, so two replicas checking at once mark and log it once. The fix is
``restart_driver``: a fresh ``fleet-rollout`` run that continues where the last one stopped
(dispatch sends nothing twice, see ``dispatch``).

The same check resumes a run that waits for a decision already taken (``rollout_policy.drivers.
resume_owed``: paused while its rollout runs, after a resume that raced the run's pause).

A rollout's run is the Console's own (``claim_run``): a run id is recorded only when the
Console started that run, or once Prefect says the run is of the rollout flow and was started
with this rollout's id. Otherwise a ``rollouts:write`` token could point its rollout at another
tenant's paused run, and the resume and abort decisions (and this check's owed resume) would go
to that run. A stored id that is not a UUID is never sent to Prefect: its driver is lost."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

import httpx
from sqlalchemy import update
from sqlmodel import Session, col, select

from console.auth import Principal
from console.core.audit_log import audit, audit_refusal
from console.core.clock import utcnow
from console.core.settings import ConsoleSettings
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
    "claim_run",
    "mark_lost",
    "restart_driver",
    "resume_run",
    "run_id",
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


def run_id(stored: str | None) -> UUID | None:
    """A recorded run id as the UUID Prefect's paths are built from; None when it is not one
    (a row written before ids were checked): such a run is never asked about."""
    try:
        return UUID(stored) if stored else None
    except ValueError:
        return None


async def run_state(api_url: str, flow_run_id: str) -> RunState | None:
    """The run's state (None: unknown to Prefect, or a recorded id that is no UUID);
    ``GatewayTimeoutError`` when Prefect does not answer (a Prefect outage is not a lost
    driver: nothing is marked)."""
    run = run_id(flow_run_id)
    if run is None:
        return None
    try:
        return await PrefectApi(api_url).flow_run_state(run)
    except (PrefectApiError, httpx.HTTPError) as exc:
        raise GatewayTimeoutError(
            ErrorReason.PREFECT_UNAVAILABLE, f"Prefect's API did not answer: {exc}"
        ) from None


def _detail(check: DriverCheck) -> str:
    if check.run is None:
        return f"flow run {check.flow_run_id} is unknown to Prefect"
    # Prefect's state message stays in the log: the record shows only the state it names.
    return f"flow run {check.flow_run_id} is {check.run.name or check.run.type}"[:512]


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
        said = found.message if found else ""
        log.warning("rollout %s lost its driver: %s (%s)", rollout_id, _detail(check), said)
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
    flow_run = run_id(run)
    if flow_run is None:
        return False
    try:
        answer = await PrefectApi(api_url).resume(flow_run, {"decision": decision.value})
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
        r.flow_run_id = str(new_run)
        r.driver_lost_at = r.driver_lost_reason = r.driver_lost_detail = None
        uow.session.add(r)
        uow.session.flush()
        audit(
            "rollout_driver_restarted",
            rollout_id=rollout_id,
            flow_run_id=str(new_run),
            previous_flow_run_id=previous,
            token_id=principal.token_id,
        )
        return present(uow.session, r, with_targets=False)

    return await rt.units.run(record, write=True)


def rollout_flow(settings: ConsoleSettings) -> str:
    """The flow whose runs drive rollouts: the flow part of ``PROXIMA_ROLLOUT_DEPLOYMENT``."""
    return settings.rollout_deployment.partition("/")[0]


async def claim_run(
    rt: ServiceRuntime, principal: Principal, rollout_id: str, flow_run_id: UUID
) -> UUID | None:
    """The run id a start may record on the rollout: the one recorded already (the Console
    started it), or a run Prefect says is of the rollout flow and was started with this
    rollout's id. Anything else is refused (409 ``foreign_flow_run``) and audited. Without
    Prefect the Console cannot ask: the start goes on and records no run (None)."""
    rollout = await rt.units.run(
        lambda uow: load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
    )
    if rollout.flow_run_id == str(flow_run_id):
        return flow_run_id
    api_url = rt.settings.prefect_api_url
    if not api_url:
        log.warning(
            "rollout %s: flow run %s not recorded: without PROXIMA_PREFECT_API_URL the Console "
            "cannot check that it is this rollout's",
            rollout_id,
            flow_run_id,
        )
        return None
    try:
        origin = await PrefectApi(api_url).flow_run_origin(flow_run_id)
    except (PrefectApiError, httpx.HTTPError) as exc:
        raise GatewayTimeoutError(
            ErrorReason.PREFECT_UNAVAILABLE, f"Prefect's API did not answer: {exc}"
        ) from None
    flow = rollout_flow(rt.settings)
    if origin is not None and origin.flow_name == flow and origin.rollout_id == rollout_id:
        return flow_run_id
    why = (
        "unknown to Prefect"
        if origin is None
        else f"not a {flow} run"
        if origin.flow_name != flow
        else "started for another rollout"
        if origin.rollout_id
        else "started without a rollout_id"
    )
    audit_refusal(
        "rollout_flow_run_refused",
        rollout_id=rollout_id,
        flow_run_id=str(flow_run_id),
        why=why,
        token_id=principal.token_id,
        token_name=principal.name,
    )
    raise ConflictError(
        ErrorReason.FOREIGN_FLOW_RUN,
        f"flow run {flow_run_id} is {why}: a rollout records only a {flow} run started with "
        f"its rollout_id={rollout_id}",
    )
