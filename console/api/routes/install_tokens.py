"""Install tokens: created for the caller's environment, shown once, stored hashed."""

from datetime import timedelta

from fastapi import APIRouter, status
from sqlmodel import col, select

from console.api.deps import PrincipalDep, SessionDep
from console.api.responses import errors
from console.core.clock import utcnow
from console.core.secrets import INSTALL_TOKEN_PREFIX, display_prefix, new_token, token_hash
from console.errors import NotFoundError
from console.models import InstallToken
from console.schemas import InstallTokenCreate, InstallTokenCreated, InstallTokenPublic, Scope
from console.views import install_token_public

router = APIRouter(prefix="/api/v1/install-tokens", tags=["install tokens"])
_ERRORS = errors(401, 403)


def create_install_token(
    session: SessionDep, *, client_id: str, environment_id: str, body: InstallTokenCreate
) -> InstallTokenCreated:
    raw = new_token(INSTALL_TOKEN_PREFIX)
    now = utcnow()
    token = InstallToken(
        client_id=client_id,
        environment_id=environment_id,
        name=body.name,
        token_hash=token_hash(raw),
        prefix=display_prefix(raw),
        cluster_slug=body.cluster_slug,
        created_at=now,
        expires_at=now + timedelta(seconds=body.expires_in_seconds)
        if body.expires_in_seconds
        else None,
        max_uses=body.max_uses,
    )
    session.add(token)
    session.commit()
    return InstallTokenCreated(**install_token_public(token).model_dump(), token=raw)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=InstallTokenCreated, responses=_ERRORS
)
def create(
    body: InstallTokenCreate, session: SessionDep, principal: PrincipalDep
) -> InstallTokenCreated:
    """The token is in this answer only: store it now."""
    principal.require(Scope.TOKENS_WRITE)
    return create_install_token(
        session, client_id=principal.client_id, environment_id=principal.environment_id, body=body
    )


@router.get("", response_model=list[InstallTokenPublic], responses=_ERRORS)
def list_tokens(session: SessionDep, principal: PrincipalDep) -> list[InstallTokenPublic]:
    if Scope.TOKENS_READ not in principal.scopes:
        principal.require(Scope.TOKENS_WRITE)
    rows = session.exec(
        select(InstallToken)
        .where(
            InstallToken.client_id == principal.client_id,
            InstallToken.environment_id == principal.environment_id,
        )
        .order_by(col(InstallToken.created_at).desc())
    ).all()
    now = utcnow()
    return [install_token_public(t, now) for t in rows]


@router.post("/{token_id}/revoke", response_model=InstallTokenPublic, responses=_ERRORS)
def revoke(token_id: str, session: SessionDep, principal: PrincipalDep) -> InstallTokenPublic:
    token = session.get(InstallToken, token_id)
    if token is None:
        raise NotFoundError("install_token_not_found", f"install token {token_id} not found")
    principal.require_on(
        Scope.TOKENS_WRITE, client_id=token.client_id, environment_id=token.environment_id
    )
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.add(token)
        session.commit()
    return install_token_public(token)
