"""Typed dependencies shared by the routes."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlmodel import Session

from console.auth import Principal, authenticate
from console.runtime import ConsoleRuntime


def get_runtime(request: Request) -> ConsoleRuntime:
    runtime: ConsoleRuntime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[ConsoleRuntime, Depends(get_runtime)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    with Session(runtime.engine, expire_on_commit=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_principal(
    session: SessionDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return authenticate(session, authorization)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
