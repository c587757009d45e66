"""The fleet: list and inspect agents; release, rotate and revoke identities."""

from typing import Annotated

from fastapi import APIRouter, Query

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.schemas import ReleaseAnswer, RotationResult
from console.services import fleet, identities
from contracts.agent_types import AgentType
from contracts.bounds import MAX_SQL_INT
from contracts.views import AgentDetailView, AgentPage, AgentView
from contracts.vocabulary import AgentFlag, AgentStatus

router = APIRouter(prefix="/api/v1/fleet/agents", tags=["fleet"])

_ERRORS = errors(401, 403, 404, 409)


@router.get("", response_model=AgentPage, responses=_ERRORS)
async def list_agents(
    principal: PrincipalDep,
    runtime: RuntimeDep,
    agent_type: AgentType | None = None,
    status: AgentStatus | None = None,
    version: str | None = None,
    name: Annotated[str | None, Query(max_length=253, description="substring")] = None,
    flag: AgentFlag | None = None,
    label: Annotated[str | None, Query(description="k=v")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_SQL_INT)] = 0,
) -> AgentPage:
    return await fleet.list_agents(
        runtime,
        principal,
        agent_type=agent_type,
        status=status,
        version=version,
        name=name,
        flag=flag,
        label=label,
        limit=limit,
        offset=offset,
    )


@router.get("/{agent_id}", response_model=AgentDetailView, responses=_ERRORS)
async def get_agent(agent_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> AgentDetailView:
    return await fleet.get_agent(runtime, principal, agent_id)


@router.post("/{agent_id}/release-identity", response_model=ReleaseAnswer, responses=_ERRORS)
async def release(
    agent_id: str, principal: PrincipalDep, runtime: RuntimeDep, dry_run: bool = False
) -> ReleaseAnswer:
    """Free the record's name so the next enrollment re-binds it (same id, links, history).

    Refuses a revoked agent and one seen within the quiet window. ``dry_run=true`` answers
    what would happen (the record as released, or the same refusal) and changes nothing."""
    return await identities.release(runtime, principal, agent_id, dry_run=dry_run)


@router.post("/{agent_id}/revoke", response_model=AgentView, responses=_ERRORS)
async def revoke_agent(agent_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> AgentView:
    """Revoke the identity: its live NATS connection is cut and it is never re-bound."""
    return await identities.revoke_agent(runtime, principal, agent_id)


@router.post(
    "/{agent_id}/rotate-credentials",
    response_model=RotationResult,
    responses=errors(401, 403, 404, 409, 504),
)
async def rotate_credentials(
    agent_id: str, principal: PrincipalDep, runtime: RuntimeDep
) -> RotationResult:
    """Ask the online agent for a new key, signed by its current one; wait for it to land."""
    return await identities.rotate_credentials(runtime, principal, agent_id)
