"""Fleet audit runs: the fleet-audit flow posts findings; operators and the UI read them."""

from typing import Annotated

from fastapi import APIRouter, Query, status

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.services import audit
from contracts.audit import AuditRunCreate, AuditRunPublic

router = APIRouter(prefix="/api/v1/audit", tags=["audit"])
_ERRORS = errors(401, 403, 404)


@router.post(
    "/runs", status_code=status.HTTP_201_CREATED, response_model=AuditRunPublic, responses=_ERRORS
)
async def create_run(
    body: AuditRunCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> AuditRunPublic:
    return await audit.record_run(runtime, principal, body)


@router.get("/runs", response_model=list[AuditRunPublic], responses=_ERRORS)
async def list_runs(
    principal: PrincipalDep, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=200)] = 20
) -> list[AuditRunPublic]:
    return await audit.list_runs(runtime, principal, limit=limit)


@router.get("/runs/latest", response_model=AuditRunPublic, responses=_ERRORS)
async def latest_run(principal: PrincipalDep, runtime: RuntimeDep) -> AuditRunPublic:
    return await audit.latest_run(runtime, principal)


@router.get("/runs/{run_id}", response_model=AuditRunPublic, responses=_ERRORS)
async def get_run(run_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> AuditRunPublic:
    return await audit.get_run(runtime, principal, run_id)
