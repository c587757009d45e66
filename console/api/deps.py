"""Typed dependencies shared by the routes: the running Console and the caller."""

from typing import Annotated

from fastapi import Depends, Header, Request

from console.auth import Principal
from console.core.audit_log import audit_refusal, client_address
from console.core.secrets import loggable_prefix
from console.errors import UnauthorizedError
from console.runtime import ConsoleRuntime
from console.services import access


def get_runtime(request: Request) -> ConsoleRuntime:
    runtime: ConsoleRuntime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[ConsoleRuntime, Depends(get_runtime)]


async def get_principal(
    runtime: RuntimeDep,
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
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
