"""API tokens for people and flows, bound to the caller's (client, environment)."""

from datetime import timedelta

from fastapi import APIRouter, status
from sqlmodel import col, select

from console.api.deps import PrincipalDep, SessionDep
from console.api.responses import errors
from console.core.clock import utcnow
from console.core.secrets import API_TOKEN_PREFIX, display_prefix, new_token, token_hash
from console.errors import ForbiddenError, NotFoundError
from console.models import ApiToken
from console.schemas import ApiTokenCreate, ApiTokenCreated, ApiTokenPublic, Scope, Whoami

router = APIRouter(prefix="/api/v1", tags=["api tokens"])
_ERRORS = errors(401, 403)


def api_token_public(t: ApiToken) -> ApiTokenPublic:
    return ApiTokenPublic(
        id=t.id,
        name=t.name,
        prefix=t.prefix,
        client_id=t.client_id,
        environment_id=t.environment_id,
        scopes=list(t.scopes),
        created_at=t.created_at,
        expires_at=t.expires_at,
        revoked_at=t.revoked_at,
        last_used_at=t.last_used_at,
    )


@router.get("/whoami", response_model=Whoami, responses=_ERRORS)
def whoami(principal: PrincipalDep) -> Whoami:
    return Whoami(
        token_id=principal.token_id,
        client_id=principal.client_id,
        environment_id=principal.environment_id,
        scopes=sorted(principal.scopes),
    )


@router.post(
    "/api-tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiTokenCreated,
    responses=_ERRORS,
)
def create(body: ApiTokenCreate, session: SessionDep, principal: PrincipalDep) -> ApiTokenCreated:
    """A new token for the same client and environment, with at most the caller's scopes."""
    principal.require(Scope.TOKENS_WRITE)
    wanted = {s.value for s in body.scopes}
    if not wanted <= principal.scopes:
        raise ForbiddenError(
            "scope_escalation",
            "cannot grant scopes this token does not hold: "
            + ", ".join(sorted(wanted - principal.scopes)),
        )
    raw = new_token(API_TOKEN_PREFIX)
    now = utcnow()
    token = ApiToken(
        client_id=principal.client_id,
        environment_id=principal.environment_id,
        name=body.name,
        token_hash=token_hash(raw),
        prefix=display_prefix(raw),
        scopes=sorted(wanted),
        created_at=now,
        expires_at=now + timedelta(seconds=body.expires_in_seconds)
        if body.expires_in_seconds
        else None,
    )
    session.add(token)
    session.commit()
    return ApiTokenCreated(**api_token_public(token).model_dump(), token=raw)


@router.get("/api-tokens", response_model=list[ApiTokenPublic], responses=_ERRORS)
def list_tokens(session: SessionDep, principal: PrincipalDep) -> list[ApiTokenPublic]:
    if Scope.TOKENS_READ not in principal.scopes:
        principal.require(Scope.TOKENS_WRITE)
    rows = session.exec(
        select(ApiToken)
        .where(
            ApiToken.client_id == principal.client_id,
            ApiToken.environment_id == principal.environment_id,
        )
        .order_by(col(ApiToken.created_at))
    ).all()
    return [api_token_public(t) for t in rows]


@router.post("/api-tokens/{token_id}/revoke", response_model=ApiTokenPublic, responses=_ERRORS)
def revoke(token_id: str, session: SessionDep, principal: PrincipalDep) -> ApiTokenPublic:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFoundError("api_token_not_found", f"API token {token_id} not found")
    principal.require_on(
        Scope.TOKENS_WRITE, client_id=token.client_id, environment_id=token.environment_id
    )
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.add(token)
        session.commit()
    return api_token_public(token)
