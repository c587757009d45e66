"""Rollouts: create (and start the Prefect deployment), inspect, dispatch waves, decide."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.schemas import RolloutReason, RolloutStart
from console.services.rollouts import dispatch as dispatching
from console.services.rollouts import drivers, lifecycle, planning, reads
from contracts.bounds import MAX_SQL_INT
from contracts.rollouts import DispatchResult, RolloutCreate, RolloutPublic
from rollout_policy import EventKind

router = APIRouter(prefix="/api/v1/fleet/rollouts", tags=["rollouts"])
_ERRORS = errors(400, 401, 403, 404, 409)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=RolloutPublic, responses=_ERRORS
)
async def create(
    body: RolloutCreate, request: Request, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    """Decide eligibility and waves now, record them, and start the fleet-rollout deployment.
    The artifact's URL must be this Console's own (an uploaded build) or on
    PROXIMA_ARTIFACT_URL_ALLOW."""
    base_url = runtime.backend_url(str(request.base_url))
    return await planning.create(runtime, principal, body, base_url=base_url)


@router.get("", response_model=list[RolloutPublic], responses=_ERRORS)
async def list_rollouts(
    principal: PrincipalDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[RolloutPublic]:
    return await reads.list_rollouts(runtime, principal, limit=limit)


@router.get("/{rollout_id}", response_model=RolloutPublic, responses=_ERRORS)
async def get_rollout(
    rollout_id: str,
    principal: PrincipalDep,
    runtime: RuntimeDep,
    targets: bool = True,
    wave: Annotated[int | None, Query(ge=0, le=MAX_SQL_INT)] = None,
) -> RolloutPublic:
    """Waves, counts, per-agent results (``targets=false`` leaves the per-agent list out;
    ``wave=N`` keeps only wave N's)."""
    return await reads.get_rollout(runtime, principal, rollout_id, targets=targets, wave=wave)


@router.post("/{rollout_id}/start", response_model=RolloutPublic, responses=_ERRORS)
async def start(
    rollout_id: str, body: RolloutStart, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    """Called by the flow: pending → running (idempotent), recording its flow run."""
    return await lifecycle.transition(
        runtime, principal, rollout_id, EventKind.START, flow_run_id=body.flow_run_id
    )


@router.post("/{rollout_id}/pause", response_model=RolloutPublic, responses=_ERRORS)
async def pause(
    rollout_id: str, body: RolloutReason, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    return await lifecycle.transition(
        runtime, principal, rollout_id, EventKind.PAUSE, reason=body.reason
    )


@router.post("/{rollout_id}/resume", response_model=RolloutPublic, responses=_ERRORS)
async def resume(rollout_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> RolloutPublic:
    """Stalled or paused → running. Results so far become the baseline the criteria judge from.
    A paused flow run is resumed in Prefect too: 409 ``resume_refused`` when Prefect refuses,
    409 ``driver_lost`` when the run is gone (restart the driver first)."""
    return await lifecycle.transition(runtime, principal, rollout_id, EventKind.RESUME)


@router.post(
    "/{rollout_id}/restart-driver",
    response_model=RolloutPublic,
    responses=errors(401, 403, 404, 409, 504),
)
async def restart_driver(
    rollout_id: str, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    """Start a fresh ``fleet-rollout`` flow run for a rollout whose run crashed, failed, was
    cancelled or vanished; it continues where the last one stopped and sends nothing twice.
    409 ``driver_running`` while the recorded run is alive."""
    return await drivers.restart_driver(runtime, principal, rollout_id)


@router.post("/{rollout_id}/abort", response_model=RolloutPublic, responses=_ERRORS)
async def abort(
    rollout_id: str, body: RolloutReason, principal: PrincipalDep, runtime: RuntimeDep
) -> RolloutPublic:
    return await lifecycle.transition(
        runtime, principal, rollout_id, EventKind.ABORT, reason=body.reason
    )


@router.post("/{rollout_id}/complete", response_model=RolloutPublic, responses=_ERRORS)
async def complete(rollout_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> RolloutPublic:
    """Called by the flow when every wave is done."""
    return await lifecycle.transition(runtime, principal, rollout_id, EventKind.COMPLETE)


@router.post(
    "/{rollout_id}/waves/{wave}/dispatch", response_model=DispatchResult, responses=_ERRORS
)
async def dispatch(
    rollout_id: str,
    wave: Annotated[int, Path(ge=0, le=MAX_SQL_INT)],
    principal: PrincipalDep,
    runtime: RuntimeDep,
) -> DispatchResult:
    """Send self_update to the wave's agents not yet sent to. Safe to call again: a target is
    dispatched at most once, and nothing is sent unless the rollout is running."""
    return await dispatching.dispatch(runtime, principal, rollout_id, wave)
