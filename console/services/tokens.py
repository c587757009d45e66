"""Tokens: install tokens (what agents enroll with) and API tokens (what people and flows
authenticate with). A token is returned once, at creation; only its hash is stored."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import col, select

from console.auth import Principal
from console.core.audit_log import audit, audit_refusal
from console.core.clock import utcnow
from console.core.secrets import (
    API_TOKEN_PREFIX,
    INSTALL_TOKEN_PREFIX,
    display_prefix,
    new_token,
    token_hash,
)
from console.errors import ForbiddenError, NotFoundError
from console.models import ApiToken, InstallToken
from console.schemas import (
    ApiTokenCreate,
    ApiTokenCreated,
    ApiTokenPublic,
    InstallTokenCreate,
    InstallTokenCreated,
    InstallTokenPublic,
    Whoami,
)
from console.services import clusters
from console.services.presenters import api_token_public, install_token_public
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.vocabulary import ErrorReason, Scope


def require_token_reader(principal: Principal) -> None:
    """Listing tokens needs ``tokens:read`` or ``tokens:write``."""
    if Scope.TOKENS_READ not in principal.scopes:
        principal.require(Scope.TOKENS_WRITE)


def whoami(principal: Principal) -> Whoami:
    return Whoami(
        token_id=principal.token_id,
        client_id=principal.client_id,
        environment_id=principal.environment_id,
        scopes=sorted(principal.scopes),
    )


async def create_install_token(
    rt: ServiceRuntime, principal: Principal, body: InstallTokenCreate
) -> InstallTokenCreated:
    """A token for the caller's environment; the answer is the only place it appears."""
    principal.require(Scope.TOKENS_WRITE)
    return await rt.units.run(lambda uow: _new_install_token(uow, principal, body), write=True)


def _new_install_token(
    uow: UnitOfWork, principal: Principal, body: InstallTokenCreate
) -> InstallTokenCreated:
    raw = new_token(INSTALL_TOKEN_PREFIX)
    now = utcnow()
    token = InstallToken(
        client_id=principal.client_id,
        environment_id=principal.environment_id,
        name=body.name,
        token_hash=token_hash(raw),
        prefix=display_prefix(raw),
        cluster_slug=body.cluster_slug,
        created_at=now,
        expires_at=now + timedelta(seconds=body.expires_in_seconds)
        if body.expires_in_seconds
        else None,
        max_uses=body.max_uses,
        parent_id=principal.token_id,
    )
    uow.session.add(token)
    uow.session.flush()
    audit(
        "install_token_created",
        token_id=token.id,
        prefix=token.prefix,
        cluster_slug=token.cluster_slug,
        environment_id=token.environment_id,
        by_token_id=principal.token_id,
    )
    return InstallTokenCreated(**install_token_public(token).model_dump(), token=raw)


async def create_cluster_install_token(
    rt: ServiceRuntime, principal: Principal, slug: str
) -> InstallTokenCreated:
    """Another install token for a registered cluster (the first one is shown once)."""
    principal.require(Scope.TOKENS_WRITE)

    def work(uow: UnitOfWork) -> InstallTokenCreated:
        cluster = clusters.load(uow.session, principal.environment_id, slug)
        body = InstallTokenCreate(name=f"cluster {cluster.slug}", cluster_slug=cluster.slug)
        return _new_install_token(uow, principal, body)

    return await rt.units.run(work, write=True)


async def list_install_tokens(rt: ServiceRuntime, principal: Principal) -> list[InstallTokenPublic]:
    require_token_reader(principal)

    def work(uow: UnitOfWork) -> list[InstallTokenPublic]:
        rows = uow.session.exec(
            select(InstallToken)
            .where(
                InstallToken.client_id == principal.client_id,
                InstallToken.environment_id == principal.environment_id,
            )
            .order_by(col(InstallToken.created_at).desc())
        ).all()
        now = utcnow()
        return [install_token_public(t, now) for t in rows]

    return await rt.units.run(work)


async def revoke_install_token(
    rt: ServiceRuntime, principal: Principal, token_id: str
) -> InstallTokenPublic:
    def work(uow: UnitOfWork) -> InstallTokenPublic:
        token = uow.session.get(InstallToken, token_id)
        if token is None:
            raise NotFoundError(
                ErrorReason.INSTALL_TOKEN_NOT_FOUND, f"install token {token_id} not found"
            )
        principal.require_on(
            Scope.TOKENS_WRITE, client_id=token.client_id, environment_id=token.environment_id
        )
        if token.revoked_at is None:
            token.revoked_at = utcnow()
            uow.session.add(token)
            audit(
                "install_token_revoked",
                token_id=token.id,
                prefix=token.prefix,
                by_token_id=principal.token_id,
            )
        return install_token_public(token)

    return await rt.units.run(work, write=True)


async def create_api_token(
    rt: ServiceRuntime, principal: Principal, body: ApiTokenCreate
) -> ApiTokenCreated:
    """A child of the caller's token, for the same client and environment: at most the caller's
    scopes, expiring no later than the caller (``child_expiry``), and revoked with it."""
    principal.require(Scope.TOKENS_WRITE)
    wanted = {s.value for s in body.scopes}
    if not wanted <= principal.scopes:
        _refused_escalation(principal, "mint", sorted(wanted - principal.scopes))
        raise ForbiddenError(
            ErrorReason.SCOPE_ESCALATION,
            "cannot grant scopes this token does not hold: "
            + ", ".join(sorted(wanted - principal.scopes)),
        )

    def work(uow: UnitOfWork) -> ApiTokenCreated:
        parent = uow.session.get(ApiToken, principal.token_id)
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
            expires_at=child_expiry(
                now, body.expires_in_seconds, parent.expires_at if parent else None
            ),
            parent_id=principal.token_id,
        )
        uow.session.add(token)
        uow.session.flush()
        audit(
            "api_token_created",
            token_id=token.id,
            prefix=token.prefix,
            scopes=token.scopes,
            expires_at=token.expires_at.isoformat() if token.expires_at else None,
            environment_id=token.environment_id,
            by_token_id=principal.token_id,
        )
        return ApiTokenCreated(**api_token_public(token).model_dump(), token=raw)

    return await rt.units.run(work, write=True)


def child_expiry(
    now: datetime, expires_in_seconds: int | None, parent_expires_at: datetime | None
) -> datetime | None:
    """A child expires when asked, and never after its parent; a child of a token that never
    expires may itself never expire (revoking the parent still ends it)."""
    asked = now + timedelta(seconds=expires_in_seconds) if expires_in_seconds else None
    if parent_expires_at is None:
        return asked
    return parent_expires_at if asked is None else min(asked, parent_expires_at)


async def list_api_tokens(rt: ServiceRuntime, principal: Principal) -> list[ApiTokenPublic]:
    require_token_reader(principal)

    def work(uow: UnitOfWork) -> list[ApiTokenPublic]:
        rows = uow.session.exec(
            select(ApiToken)
            .where(
                ApiToken.client_id == principal.client_id,
                ApiToken.environment_id == principal.environment_id,
            )
            .order_by(col(ApiToken.created_at))
        ).all()
        return [api_token_public(t) for t in rows]

    return await rt.units.run(work)


async def revoke_api_token(
    rt: ServiceRuntime, principal: Principal, token_id: str
) -> ApiTokenPublic:
    """Revoke a token and every token minted under it. The caller must hold every scope the
    token holds: a token never revokes one that outranks it."""

    def work(uow: UnitOfWork) -> ApiTokenPublic:
        token = uow.session.get(ApiToken, token_id)
        if token is None:
            raise NotFoundError(ErrorReason.API_TOKEN_NOT_FOUND, f"API token {token_id} not found")
        principal.require_on(
            Scope.TOKENS_WRITE, client_id=token.client_id, environment_id=token.environment_id
        )
        beyond = set(token.scopes) - principal.scopes
        if beyond:
            _refused_escalation(principal, "revoke", sorted(beyond), target_token_id=token.id)
            raise ForbiddenError(
                ErrorReason.SCOPE_ESCALATION,
                "cannot revoke a token holding scopes this token does not hold: "
                + ", ".join(sorted(beyond)),
            )
        now = utcnow()
        if token.revoked_at is None:
            token.revoked_at = now
            uow.session.add(token)
        descendants, install_tokens = _revoke_descendants(uow, token.id, now)
        audit(
            "api_token_revoked",
            token_id=token.id,
            prefix=token.prefix,
            descendants_revoked=descendants,
            install_tokens_revoked=install_tokens,
            by_token_id=principal.token_id,
        )
        return api_token_public(token)

    return await rt.units.run(work, write=True)


def _revoke_descendants(
    uow: UnitOfWork, token_id: str, now: datetime
) -> tuple[list[str], list[str]]:
    """Revoke what was minted under ``token_id``, generation by generation: the API tokens and
    the install tokens of each generation (``token_id``'s own included). Their ids."""
    revoked: list[str] = []
    installs: list[str] = []
    parents = [token_id]
    while parents:
        children = uow.session.exec(
            select(ApiToken).where(col(ApiToken.parent_id).in_(parents))
        ).all()
        minted = uow.session.exec(
            select(InstallToken).where(col(InstallToken.parent_id).in_(parents))
        ).all()
        fresh: list[ApiToken | InstallToken] = [*children, *minted]
        for child in fresh:
            if child.revoked_at is None:
                child.revoked_at = now
                uow.session.add(child)
                (revoked if isinstance(child, ApiToken) else installs).append(child.id)
        parents = [c.id for c in children]  # ids are minted after their parent's: no cycles
    return revoked, installs


def _refused_escalation(
    principal: Principal, action: str, beyond: list[str], target_token_id: str | None = None
) -> None:
    """A refused scope escalation is an audit record: who tried, what, beyond which scopes."""
    audit_refusal(
        "scope_escalation_refused",
        reason=ErrorReason.SCOPE_ESCALATION,
        action=action,
        token_id=principal.token_id,
        token_name=principal.name,
        scopes=beyond,
        target_token_id=target_token_id,
    )
