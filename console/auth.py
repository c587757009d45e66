"""Bearer API tokens with scopes bound to (client, environment).

401: no token, or one the Console does not know (or expired/revoked).
403: a known token that lacks the scope, or asks about another client's or environment's data
(that one is an audit record: ``access_refused``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, select

from console.core.audit_log import audit_refusal
from console.core.clock import utcnow
from console.core.secrets import token_hash
from console.errors import ForbiddenError, UnauthorizedError
from console.models import ApiToken
from contracts.vocabulary import ErrorReason, Scope


@dataclass(frozen=True, slots=True)
class Principal:
    token_id: str
    name: str
    client_id: str
    environment_id: str
    scopes: frozenset[str]

    def require(self, scope: Scope) -> None:
        if scope not in self.scopes:
            raise ForbiddenError(
                ErrorReason.MISSING_SCOPE, f"this API token lacks the {scope.value!r} scope"
            )

    def require_on(self, scope: Scope, *, client_id: str, environment_id: str) -> None:
        self.require(scope)
        if client_id != self.client_id or environment_id != self.environment_id:
            audit_refusal(
                "access_refused",
                reason=ErrorReason.WRONG_ENVIRONMENT,
                token_id=self.token_id,
                token_name=self.name,
                scope=str(scope),
                client_id=client_id,
                environment_id=environment_id,
            )
            raise ForbiddenError(
                ErrorReason.WRONG_ENVIRONMENT,
                f"this API token's {scope.value!r} scope is bound to another client or environment",
            )


def authenticate(
    session: Session, authorization: str | None, now: datetime | None = None
) -> Principal:
    if not authorization:
        raise UnauthorizedError(
            ErrorReason.MISSING_TOKEN, "send an API token: Authorization: Bearer <token>"
        )
    scheme, _, raw = authorization.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise UnauthorizedError(
            ErrorReason.MALFORMED_AUTHORIZATION, "use Authorization: Bearer <token>"
        )
    token = session.exec(
        select(ApiToken).where(ApiToken.token_hash == token_hash(raw.strip()))
    ).first()
    return principal_of(token, now)


def principal_of(token: ApiToken | None, now: datetime | None = None) -> Principal:
    """The principal of a stored token, or 401 when it is unknown, revoked or expired."""
    now = now or utcnow()
    if token is None:
        raise UnauthorizedError(ErrorReason.INVALID_TOKEN, "API token is not valid")
    if token.revoked_at is not None:
        raise UnauthorizedError(ErrorReason.TOKEN_REVOKED, "API token has been revoked")
    if token.expires_at is not None and token.expires_at <= now:
        raise UnauthorizedError(ErrorReason.TOKEN_EXPIRED, "API token has expired")
    return Principal(
        token_id=token.id,
        name=token.name,
        client_id=token.client_id,
        environment_id=token.environment_id,
        scopes=frozenset(token.scopes),
    )
