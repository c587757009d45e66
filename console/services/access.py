"""Who is calling: an API token authenticated in its own unit of work, for the API (a bearer
header) and the web UI (the token behind a signed-in session) alike. Scope checks themselves
are made by each service, on ``Principal``, so a page refuses exactly what the API refuses."""

from __future__ import annotations

from dataclasses import dataclass

from console.auth import Principal, authenticate, principal_of
from console.models import ApiToken, Client, Environment
from console.services.unit_of_work import ServiceRuntime, UnitOfWork


@dataclass(frozen=True, slots=True)
class Identity:
    principal: Principal
    client_name: str
    environment_name: str


async def principal_for(rt: ServiceRuntime, authorization: str | None) -> Principal:
    """The principal of an ``Authorization`` header (401 when missing or not valid)."""
    return await rt.units.run(lambda uow: authenticate(uow.session, authorization))


async def identity_for_token(rt: ServiceRuntime, token: str | None) -> Identity:
    """The principal of a raw API token, with its client's and environment's names."""

    return await rt.units.run(
        lambda uow: _identity(uow, authenticate(uow.session, f"Bearer {token}" if token else None))
    )


def identity_for_token_id(uow: UnitOfWork, token_id: str) -> Identity:
    """The identity of a stored token (a web session's), checked afresh: 401 when it is
    gone, revoked or expired. Runs inside the caller's unit of work."""
    return _identity(uow, principal_of(uow.session.get(ApiToken, token_id)))


def _identity(uow: UnitOfWork, principal: Principal) -> Identity:
    client = uow.session.get(Client, principal.client_id)
    environment = uow.session.get(Environment, principal.environment_id)
    return Identity(
        principal=principal,
        client_name=client.name if client else principal.client_id,
        environment_name=environment.name if environment else principal.environment_id,
    )
