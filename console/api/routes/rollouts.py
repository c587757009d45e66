"""Rollouts: create (and start the Prefect deployment), inspect, dispatch waves, decide."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlmodel import Session, col, select

from console import rollouts as svc
from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.auth import Principal
from console.core.clock import utcnow
from console.models import Rollout
from console.prefect_api import PrefectApi, PrefectApiError
from console.schemas import Scope
from contracts.messages import CommandKind
from contracts.rollouts import Decision, DispatchResult, RolloutCreate, RolloutPublic
from fleet_policy import RolloutEvent

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1/fleet/rollouts", tags=["rollouts"])
_ERRORS = errors(400, 401, 403, 404, 409)


def _load(session: Session, rollout_id: str, principal: Principal, scope: str) -> Rollout:
    rollout = svc.load(session, rollout_id)
    principal.require_on(scope, client_id=rollout.client_id, environment_id=rollout.environment_id)
    return rollout


class StartBody(BaseModel):
    flow_run_id: str | None = None


class Reason(BaseModel):
    reason: str | None = None


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=RolloutPublic, responses=_ERRORS
)
async def create(
    body: RolloutCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    """Decide eligibility and waves now, record them, and start the fleet-rollout deployment."""
    principal.require(Scope.ROLLOUTS_WRITE)
    settings = runtime.settings

    def work() -> str:
        with runtime.writer(), Session(runtime.engine, expire_on_commit=False) as session:
            rollout = svc.create_rollout(
                session,
                client_id=principal.client_id,
                environment_id=principal.environment_id,
                body=body,
                stale_seconds=settings.agent_stale_seconds,
            )
            session.commit()
            return rollout.id

    rollout_id = await run_in_threadpool(work)
    note: str | None = None
    if body.start_flow:
        if settings.prefect_api_url:
            try:
                flow_run_id = await PrefectApi(settings.prefect_api_url).start_deployment(
                    settings.rollout_deployment, {"rollout_id": rollout_id}
                )
            except (PrefectApiError, Exception) as exc:  # the record stays; say why it waits
                note = f"could not start Prefect deployment {settings.rollout_deployment}: {exc}"
            else:
                await run_in_threadpool(_set_flow_run, runtime, rollout_id, flow_run_id)
        else:
            note = (
                "PROXIMA_PREFECT_API_URL is not set: start the fleet-rollout deployment with "
                f"rollout_id={rollout_id}"
            )
    if note:
        await run_in_threadpool(_set_note, runtime, rollout_id, note)
    return await run_in_threadpool(_public, runtime, rollout_id, True)


def _set_flow_run(runtime: RuntimeDep, rollout_id: str, flow_run_id: str) -> None:
    with Session(runtime.engine) as session:
        rollout = svc.load(session, rollout_id)
        rollout.flow_run_id = flow_run_id
        session.add(rollout)
        session.commit()


def _set_note(runtime: RuntimeDep, rollout_id: str, note: str) -> None:
    with Session(runtime.engine) as session:
        rollout = svc.load(session, rollout_id)
        if rollout.state == "pending":
            rollout.state_reason = note
            session.add(rollout)
            session.commit()


def _public(runtime: RuntimeDep, rollout_id: str, targets: bool) -> RolloutPublic:
    with Session(runtime.engine) as session:
        return svc.public(session, svc.load(session, rollout_id), with_targets=targets)


@router.get("", response_model=list[RolloutPublic], responses=_ERRORS)
def list_rollouts(
    principal: PrincipalDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[RolloutPublic]:
    principal.require(Scope.ROLLOUTS_READ)
    with Session(runtime.engine) as session:
        rows = session.exec(
            select(Rollout)
            .where(
                Rollout.client_id == principal.client_id,
                Rollout.environment_id == principal.environment_id,
            )
            .order_by(col(Rollout.created_at).desc())
            .limit(limit)
        ).all()
        return [svc.public(session, r, with_targets=False) for r in rows]


@router.get("/{rollout_id}", response_model=RolloutPublic, responses=_ERRORS)
def get_rollout(
    rollout_id: str, principal: PrincipalDep, runtime: RuntimeDep, targets: bool = True
) -> RolloutPublic:
    """Waves, counts, per-agent results (``targets=false`` leaves the per-agent list out)."""
    with Session(runtime.engine) as session:
        rollout = _load(session, rollout_id, principal, Scope.ROLLOUTS_READ)
        return svc.public(session, rollout, with_targets=targets)


async def _transition(
    runtime: RuntimeDep,
    principal: Principal,
    rollout_id: str,
    action: str,
    reason: str | None = None,
    flow_run_id: str | None = None,
) -> RolloutPublic:
    def work() -> tuple[str | None, str]:
        with runtime.writer(), Session(runtime.engine, expire_on_commit=False) as session:
            rollout = _load(session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
            now = utcnow()
            if action == "start":
                if flow_run_id:
                    rollout.flow_run_id = flow_run_id
                if rollout.state == "pending":
                    svc.apply_event(rollout, RolloutEvent.start(), now)
            elif action == "pause":
                svc.apply_event(rollout, RolloutEvent.pause(reason or "paused by an operator"), now)
            elif action == "resume":
                svc.resume(session, rollout=rollout, now=now)
            elif action == "abort":
                if rollout.state != "aborted":
                    svc.apply_event(
                        rollout, RolloutEvent.abort(reason or "aborted by an operator"), now
                    )
            elif action == "complete":
                if rollout.state != "succeeded":
                    svc.apply_event(rollout, RolloutEvent.complete(), now)
            session.add(rollout)
            session.commit()
            return rollout.flow_run_id, rollout.state

    flow_run, _state = await run_in_threadpool(work)
    settings = runtime.settings
    if action in ("resume", "abort") and flow_run and settings.prefect_api_url and not flow_run_id:
        decision = Decision.RESUME if action == "resume" else Decision.ABORT
        try:
            await PrefectApi(settings.prefect_api_url).resume(
                flow_run, {"decision": decision.value}
            )
        except Exception:  # the flow also polls the Console's state
            log.info("could not resume flow run %s in Prefect", flow_run, exc_info=True)
    return await run_in_threadpool(_public, runtime, rollout_id, False)


@router.post("/{rollout_id}/start", response_model=RolloutPublic, responses=_ERRORS)
async def start(
    rollout_id: str, body: StartBody, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    """Called by the flow: pending → running (idempotent), recording its flow run."""
    return await _transition(runtime, principal, rollout_id, "start", flow_run_id=body.flow_run_id)


@router.post("/{rollout_id}/pause", response_model=RolloutPublic, responses=_ERRORS)
async def pause(
    rollout_id: str, body: Reason, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    return await _transition(runtime, principal, rollout_id, "pause", reason=body.reason)


@router.post("/{rollout_id}/resume", response_model=RolloutPublic, responses=_ERRORS)
async def resume(rollout_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> RolloutPublic:
    """Stalled or paused → running. Results so far become the baseline the criteria judge from."""
    return await _transition(runtime, principal, rollout_id, "resume")


@router.post("/{rollout_id}/abort", response_model=RolloutPublic, responses=_ERRORS)
async def abort(
    rollout_id: str, body: Reason, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    return await _transition(runtime, principal, rollout_id, "abort", reason=body.reason)


@router.post("/{rollout_id}/complete", response_model=RolloutPublic, responses=_ERRORS)
async def complete(rollout_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> RolloutPublic:
    """Called by the flow when every wave is done."""
    return await _transition(runtime, principal, rollout_id, "complete")


@router.post(
    "/{rollout_id}/waves/{wave}/dispatch", response_model=DispatchResult, responses=_ERRORS
)
async def dispatch(
    rollout_id: str, wave: int, principal: PrincipalDep, runtime: RuntimeDep
) -> DispatchResult:
    """Send self_update to the wave's agents not yet sent to. Safe to call again: a target is
    dispatched at most once, and nothing is sent unless the rollout is running."""

    def work() -> svc.Dispatch:
        with runtime.writer(), Session(runtime.engine, expire_on_commit=False) as session:
            rollout = _load(session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
            result = svc.dispatch_wave(session, rollout=rollout, wave=wave)
            session.commit()
            return result

    result = await run_in_threadpool(work)
    if result.to_send and result.artifact is not None:
        args = {"rollout_id": rollout_id, **result.artifact.model_dump()}
        await runtime.send_commands(
            [(agent_id, command_id) for agent_id, command_id in result.to_send],
            CommandKind.SELF_UPDATE,
            args,
        )
    return DispatchResult(
        rollout_id=rollout_id,
        wave=wave,
        sent=len(result.to_send),
        already_sent=result.already_sent,
        refused=result.refused,
    )
