"""Typed dependencies shared by the routes: the running Console and the caller."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from console.auth import Principal
from console.core.audit_log import audit_refusal, client_address
from console.core.secrets import loggable_prefix
from console.errors import UnauthorizedError
from console.runtime import ConsoleRuntime
from console.services import access


async def get_runtime(request: Request) -> ConsoleRuntime:
    runtime: ConsoleRuntime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[ConsoleRuntime, Depends(get_runtime)]


class _BearerHeader(HTTPBearer):
    """Declares the bearer scheme in the OpenAPI document (so clients and schemathesis know
    which operations need a token) and hands over the raw header: ``access.principal_for``
    decides every refusal (missing, malformed, unknown, revoked, expired)."""

    async def __call__(self, request: Request) -> str | None:  # type: ignore[override]
        return request.headers.get("authorization")


_bearer = _BearerHeader(auto_error=False, description="An API token: `Bearer pxa_…`")


async def get_principal(
    runtime: RuntimeDep,
    request: Request,
    authorization: Annotated[str | None, Depends(_bearer)],
) -> Principal:
    try:
        return await access.principal_for(runtime, authorization)
    except UnauthorizedError as exc:
        audit_refusal(
            "auth_failed",
            surface="api",
            reason=exc.reason,
            source=client_address(request),
            path=request.url.path,
            token_prefix=loggable_prefix((authorization or "").partition(" ")[2].strip()),
        )
        raise


PrincipalDep = Annotated[Principal, Depends(get_principal)]
