"""Who is looking: the signed-in session, re-authenticated on every request with the API's rules
(``console.services.access``).

Pages call the same services as the API, and the services make the scope checks, so a page
refuses exactly what the API would, with the same reason. ``Viewer.require`` is the same check
(``Principal.require``), for what a page shows before it calls a service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from console.auth import Principal
from console.errors import UnauthorizedError
from console.runtime import ConsoleRuntime
from console.services import access
from console.services.unit_of_work import UnitOfWork
from console.web.errors import SignInRequired
from console.web.forms import Form, check_csrf, read_form
from console.web.sessions import SESSION_COOKIE, SessionStore, WebSession
from console.web.templating import Templates
from contracts.vocabulary import ErrorReason, Scope

__all__ = [
    "FormDep",
    "RuntimeDep",
    "Viewer",
    "ViewerDep",
    "WebState",
    "get_runtime",
    "get_web",
    "next_path",
    "save_session",
]


async def get_runtime(request: Request) -> ConsoleRuntime:
    runtime: ConsoleRuntime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[ConsoleRuntime, Depends(get_runtime)]


@dataclass(frozen=True, slots=True)
class WebState:
    store: SessionStore
    templates: Templates


def get_web(request: Request) -> WebState:
    web: WebState = request.app.state.web
    return web


@dataclass(frozen=True, slots=True)
class Viewer:
    session: WebSession
    principal: Principal
    client_name: str
    environment_name: str

    @property
    def csrf(self) -> str:
        return self.session.csrf

    @property
    def token_name(self) -> str:
        return self.principal.name

    def can(self, scope: Scope) -> bool:
        return scope in self.principal.scopes

    def can_any(self, *scopes: Scope) -> bool:
        return any(s in self.principal.scopes for s in scopes)

    def require(self, scope: Scope) -> None:
        self.principal.require(scope)


def next_path(request: Request) -> str:
    path = request.url.path
    return f"{path}?{request.url.query}" if request.url.query else path


async def get_viewer(request: Request, runtime: RuntimeDep) -> Viewer:
    web = get_web(request)
    cookie = request.cookies.get(SESSION_COOKIE)

    def work(uow: UnitOfWork) -> tuple[WebSession, access.Identity | UnauthorizedError] | None:
        session = web.store.load(uow, cookie)
        if session is None:
            return None
        try:
            return session, access.identity_for_token_id(uow, session.token_id)
        except UnauthorizedError as exc:
            return session, exc

    found = await runtime.units.run(work)
    if found is None:
        # A cookie that names no live session: say why the user is asked again, not just ask.
        raise SignInRequired(next_path(request), ErrorReason.SESSION_ENDED if cookie else None)
    session, identity = found
    if isinstance(identity, UnauthorizedError):
        await web.store.drop(session)
        raise SignInRequired(next_path(request), identity.reason)
    viewer = Viewer(
        session=session,
        principal=identity.principal,
        client_name=identity.client_name,
        environment_name=identity.environment_name,
    )
    request.state.viewer = viewer
    return viewer


async def save_session(request: Request) -> None:
    """Write back what this request changed in its session (PageRoute calls it last)."""
    viewer: Viewer | None = getattr(request.state, "viewer", None)
    if viewer is not None:
        await get_web(request).store.save(viewer.session)


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


async def get_form(request: Request, viewer: ViewerDep) -> Form:
    """The POSTed form, once its CSRF token proved it came from this session's page."""
    form = await read_form(request)
    check_csrf(request, form, viewer.csrf)
    return form


FormDep = Annotated[Form, Depends(get_form)]
