"""API tokens for people and flows, bound to the caller's (client, environment); who the caller
is, and the Console's published settings."""

from fastapi import APIRouter, status

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.schemas import (
    ApiTokenCreate,
    ApiTokenCreated,
    ApiTokenPublic,
    PublishedSettings,
    Whoami,
)
from console.services import tokens
from console.services.published_settings import published_settings

router = APIRouter(prefix="/api/v1", tags=["api tokens"])
_ERRORS = errors(401, 403)


@router.get("/whoami", response_model=Whoami, responses=_ERRORS)
def whoami(principal: PrincipalDep) -> Whoami:
    return tokens.whoami(principal)


@router.get("/settings", response_model=PublishedSettings, responses=errors(401))
def settings(principal: PrincipalDep, runtime: RuntimeDep) -> PublishedSettings:
    """The Console's windows (quiet window, stale timeout, …): read them, never copy them."""
    return published_settings(runtime, principal)


@router.post(
    "/api-tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiTokenCreated,
    responses=_ERRORS,
)
async def create(
    body: ApiTokenCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> ApiTokenCreated:
    """A new token for the same client and environment, with at most the caller's scopes."""
    return await tokens.create_api_token(runtime, principal, body)


@router.get("/api-tokens", response_model=list[ApiTokenPublic], responses=_ERRORS)
async def list_tokens(principal: PrincipalDep, runtime: RuntimeDep) -> list[ApiTokenPublic]:
    return await tokens.list_api_tokens(runtime, principal)


@router.post("/api-tokens/{token_id}/revoke", response_model=ApiTokenPublic, responses=_ERRORS)
async def revoke(token_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> ApiTokenPublic:
    return await tokens.revoke_api_token(runtime, principal, token_id)
