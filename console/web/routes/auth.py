"""Sign in with an API token, sign out; ``/`` sends a signed-in operator to a page they may read."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from console.auth import Principal
from console.core.audit_log import audit, audit_refusal, client_address
from console.core.secrets import loggable_prefix
from console.errors import TooManyRequestsError, UnauthorizedError
from console.services import access
from console.web.deps import FormDep, RuntimeDep, ViewerDep, get_viewer, get_web
from console.web.errors import CsrfError, SignInRequired
from console.web.forms import CSRF_FIELD, read_form
from console.web.routing import PageRoute
from console.web.sessions import SESSION_COOKIE, SIGN_IN_COOKIE
from contracts.vocabulary import ErrorReason, Scope

router = APIRouter(route_class=PageRoute, include_in_schema=False)

_REASONS: dict[str, str] = {
    ErrorReason.SIGNED_OUT: "You signed out.",
    ErrorReason.SESSION_ENDED: "Your session ended: it was idle too long or reached its "
    "lifetime, newer sign-ins with the same API token ended it, or it was signed out in another "
    "tab. Sign in again.",
    ErrorReason.TOKEN_REVOKED: "The API token this session used has been revoked: sign in with "
    "another.",
    ErrorReason.TOKEN_EXPIRED: "The API token this session used has expired: sign in with another.",
    ErrorReason.INVALID_TOKEN: "The API token this session used is no longer valid: sign in again.",
}


def home_for(principal: Principal) -> str:
    for scope, path in (
        (Scope.CLUSTERS_READ, "/clusters"),
        (Scope.AGENTS_READ, "/agents"),
        (Scope.ROLLOUTS_READ, "/rollouts"),
        (Scope.TOKENS_READ, "/tokens"),
        (Scope.TOKENS_WRITE, "/tokens"),
    ):
        if scope in principal.scopes:
            return path
    return "/clusters"


def _safe_next(value: str) -> str | None:
    """Only a path on this Console: never ``//host`` or ``/\\host``, never back to sign-in."""
    if (
        not value.startswith("/")
        or value.startswith(("//", "/\\"))
        or value.startswith("/sign-in")
        or any(c in value for c in "\r\n")
    ):
        return None
    return value


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path="/",
    )


@router.get("/")
async def index(request: Request, runtime: RuntimeDep) -> Response:
    """The first page the signed-in token may read; the sign-in form otherwise."""
    try:
        viewer = await get_viewer(request, runtime)
    except SignInRequired:
        return RedirectResponse("/sign-in", status_code=303)
    return RedirectResponse(home_for(viewer.principal), status_code=303)


def _sign_in_page(
    request: Request, *, next_path: str, error: str | None, notice: str | None
) -> Response:
    web = get_web(request)
    nonce = secrets.token_urlsafe(24)
    response = web.templates.render(
        request,
        "sign_in.html",
        title="Sign in",
        nonce=nonce,
        next_path=next_path,
        error=error,
        notice=notice,
    )
    # Double submit: the form's nonce must match this cookie. (A signature would add nothing: a
    # page of this Console hands anyone a valid pair.)
    response.set_cookie(
        SIGN_IN_COOKIE,
        nonce,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path="/sign-in",
        max_age=3600,
    )
    return response


@router.get("/sign-in")
def sign_in_form(request: Request, next: str = "", reason: str = "") -> Response:
    return _sign_in_page(
        request,
        next_path=_safe_next(next) or "",
        error=None,
        notice=_REASONS.get(reason),
    )


@router.post("/sign-in")
async def sign_in(request: Request, runtime: RuntimeDep) -> Response:
    web = get_web(request)
    form = await read_form(request)
    nonce = request.cookies.get(SIGN_IN_COOKIE)
    if not nonce or not secrets.compare_digest(nonce, form.get(CSRF_FIELD)):
        raise CsrfError(
            "this sign-in form did not come from this Console's sign-in page (or it expired): "
            "open /sign-in and try again"
        )
    token = form.get("token").strip()
    next_path = _safe_next(form.get("next")) or ""
    source = client_address(request)
    # The token is looked up before it is counted: a valid one is counted against its own rate
    # only, never refused because others failed from this address (services.rate_limits).
    failed: UnauthorizedError | None = None
    try:
        principal = (await access.identity_for_token(runtime, token)).principal
    except UnauthorizedError as exc:
        failed = exc
    try:
        await runtime.rate_limits.check(
            runtime.rate_limits.sign_in, source=source, token=token or None, valid=not failed
        )
    except TooManyRequestsError as exc:
        audit_refusal(
            "sign_in_refused",
            reason=exc.reason,
            source=source,
            token_prefix=loggable_prefix(token),
        )
        page = _sign_in_page(request, next_path=next_path, error=exc.message, notice=None)
        page.status_code = exc.status
        page.headers["Retry-After"] = str(exc.retry_after)
        return page
    if failed is not None:
        audit_refusal(
            "auth_failed",
            surface="web",
            reason=failed.reason,
            source=source,
            token_prefix=loggable_prefix(token),
        )
        message = (
            "Paste an API token (pxa_…)."
            if failed.reason is ErrorReason.MISSING_TOKEN
            else failed.message
        )
        return _sign_in_page(request, next_path=next_path, error=message, notice=None)
    cookie = await web.store.create(principal.token_id)
    audit("sign_in", token_id=principal.token_id, source=source)
    response = RedirectResponse(next_path or home_for(principal), status_code=303)
    set_session_cookie(request, response, cookie)
    response.delete_cookie(SIGN_IN_COOKIE, path="/sign-in")
    return response


@router.post("/sign-out")
async def sign_out(request: Request, viewer: ViewerDep, _form: FormDep) -> Response:
    await get_web(request).store.drop(viewer.session)
    audit("sign_out", token_id=viewer.principal.token_id, source=client_address(request))
    response = RedirectResponse(f"/sign-in?reason={ErrorReason.SIGNED_OUT}", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
