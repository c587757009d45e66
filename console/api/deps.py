"""Typed dependencies shared by the routes: the running Console and the caller."""

from typing import Annotated

from fastapi import Depends, Header, Request

from console.auth import Principal
from console.runtime import ConsoleRuntime
from console.services import access


def get_runtime(request: Request) -> ConsoleRuntime:
    runtime: ConsoleRuntime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[ConsoleRuntime, Depends(get_runtime)]


async def get_principal(
    runtime: RuntimeDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return await access.principal_for(runtime, authorization)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
