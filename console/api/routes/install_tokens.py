"""Install tokens: created for the caller's environment, shown once, stored hashed."""

from fastapi import APIRouter, status

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.schemas import InstallTokenCreate, InstallTokenCreated, InstallTokenPublic
from console.services import tokens

router = APIRouter(prefix="/api/v1/install-tokens", tags=["install tokens"])
_ERRORS = errors(401, 403)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=InstallTokenCreated, responses=_ERRORS
)
async def create(
    body: InstallTokenCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> InstallTokenCreated:
    """The token is in this answer only: store it now."""
    return await tokens.create_install_token(runtime, principal, body)


@router.get("", response_model=list[InstallTokenPublic], responses=_ERRORS)
async def list_tokens(principal: PrincipalDep, runtime: RuntimeDep) -> list[InstallTokenPublic]:
    return await tokens.list_install_tokens(runtime, principal)


@router.post("/{token_id}/revoke", response_model=InstallTokenPublic, responses=_ERRORS)
async def revoke(token_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> InstallTokenPublic:
    return await tokens.revoke_install_token(runtime, principal, token_id)
