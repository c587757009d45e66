"""The FastAPI application. ``create_app`` builds it; nothing happens at import time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pydantic_core
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import exc as db_errors
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from console.api.responses import errors
from console.api.routes import (
    api_tokens,
    artifacts,
    audit,
    clusters,
    enroll,
    fleet,
    health,
    install_tokens,
    rollouts,
)
from console.core.settings import ConsoleSettings
from console.errors import ConsoleError, TooManyRequestsError
from console.runtime import ConsoleRuntime
from console.web import mount as mount_web
from contracts import VERSION
from contracts.rollouts import HOSTED_ARTIFACTS_PATH
from contracts.vocabulary import ErrorReason


class BodyLimit:
    """Refuse bodies over ``limit`` bytes with 413, whether or not Content-Length is sent."""

    def __init__(self, app: ASGIApp, limit: int, large: dict[str, int] | None = None) -> None:
        self.app = app
        self.default_limit = limit
        self.large = large or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = next(
            (v for prefix, v in self.large.items() if scope["path"].startswith(prefix)),
            self.default_limit,
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _too_large(limit)(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            await _too_large(limit)(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


def _too_large(limit: int) -> JSONResponse:
    return _error(413, ErrorReason.REQUEST_TOO_LARGE, f"request body is larger than {limit} bytes")


def _error(status: int, reason: ErrorReason, message: str) -> JSONResponse:
    return JSONResponse({"reason": reason.value, "message": message}, status_code=status)


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _json_declared(scope: Scope) -> bool:
    """A body FastAPI would parse as JSON: declared JSON, or no content type at all."""
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return bool(kind == b"application/json" or kind.endswith(b"+json"))
    return True


def _streamed_upload(scope: Scope) -> bool:
    """A build upload (``PUT /api/v1/artifacts/{version}``): raw bytes streamed to disk, never
    JSON, and up to the artifact size limit, so it is neither parsed nor held in memory here."""
    return bool(scope["method"] == "PUT" and scope["path"].startswith(HOSTED_ARTIFACTS_PATH))


def json_problem(body: bytes) -> str | None:
    """Why ``body`` is not strict JSON (RFC 8259's interoperable subset), or None.

    Python's ``json`` reads ``NaN``, ``Infinity`` and lone surrogates (``"\\ud800"``), which
    later fail where nothing expects them (the database, the response encoder); a NUL in a
    string is refused by PostgreSQL. All four are a 400 here, before any route sees them."""
    try:
        value = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        return f"malformed JSON: {exc}"
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "malformed JSON: a string holds a NUL character"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


class StrictJson:
    """Refuse JSON bodies that are not strict JSON with 400 ``malformed_json``; every route,
    authenticated or not. Runs inside :class:`BodyLimit`, so the body it reads is bounded."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in _BODY_METHODS
            or not _json_declared(scope)
            or _streamed_upload(scope)
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = json_problem(body) if body else None
        if problem:
            await _error(400, ErrorReason.MALFORMED_JSON, problem)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _allowed(request: Request) -> list[str]:
    """Every method some route serves on this path (Starlette names only the first route's,
    and GET and POST of one path are two routes here)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _child = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


_STATUS_REASONS = {
    404: ErrorReason.NOT_FOUND,
    405: ErrorReason.METHOD_NOT_ALLOWED,
    413: ErrorReason.REQUEST_TOO_LARGE,
    415: ErrorReason.UNSUPPORTED_MEDIA_TYPE,
}


def _validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg')}")
    return "; ".join(parts)


def _answer_database_outages(app: FastAPI, runtime: ConsoleRuntime) -> None:
    """Database work outside a unit of work (a unit raises ServiceUnavailableError itself):
    503 ``database_unavailable``, never a 500, and the outage noted once."""

    async def database_down(_request: Request, exc: Exception) -> JSONResponse:
        runtime.units.database.failed(exc)
        return _error(
            503,
            ErrorReason.DATABASE_UNAVAILABLE,
            "the Console's database is unavailable; retry later",
        )

    for error in (db_errors.OperationalError, db_errors.InterfaceError, db_errors.TimeoutError):
        app.add_exception_handler(error, database_down)


def create_app(settings: ConsoleSettings, runtime: ConsoleRuntime | None = None) -> FastAPI:
    runtime = runtime or ConsoleRuntime(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(
        title="Proxima Console",
        version=VERSION,
        lifespan=lifespan,
        description="Enrollment, identities, heartbeats and commands for Proxima agents.",
    )
    app.state.runtime = runtime

    @app.exception_handler(ConsoleError)
    async def console_error(_request: Request, exc: ConsoleError) -> JSONResponse:
        body: dict[str, Any] = {"reason": exc.reason, "message": exc.message}
        if exc.agent_id:
            body["agent_id"] = exc.agent_id
        headers = (
            {"Retry-After": str(exc.retry_after)} if isinstance(exc, TooManyRequestsError) else None
        )
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        malformed = any(e.get("type") == "json_invalid" for e in errors)
        # The offending input is not echoed back: it may be large (or not JSON-safe).
        shown = [{k: v for k, v in e.items() if k not in ("input", "url")} for e in errors[:20]]
        return JSONResponse(
            {
                "reason": ErrorReason.MALFORMED_JSON if malformed else ErrorReason.INVALID_REQUEST,
                "message": _validation_message(errors),
                "errors": json.loads(json.dumps(shown, default=str)),
            },
            status_code=400 if malformed else 422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        reason = _STATUS_REASONS.get(exc.status_code, ErrorReason.INVALID_REQUEST)
        response = _error(exc.status_code, reason, str(exc.detail))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(_allowed(request))
        return response

    @app.exception_handler(Exception)
    async def internal(_request: Request, _exc: Exception) -> JSONResponse:
        return _error(500, ErrorReason.INTERNAL_ERROR, "internal error (logged by the Console)")

    _answer_database_outages(app, runtime)

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    app.include_router(health.router)
    for module in (enroll, fleet, install_tokens, api_tokens, rollouts, artifacts, clusters, audit):
        # Any operation may answer these: strict JSON (400), no such id (404), size (413),
        # shape (422); each route documents its own others.
        app.include_router(module.router, responses=errors(400, 404, 413, 422))
    mount_web(app, runtime)
    app.add_middleware(StrictJson)
    app.add_middleware(
        BodyLimit,
        limit=settings.max_request_bytes,
        large={"/api/v1/artifacts": settings.artifact_max_bytes},
    )
    if settings.trusted_proxies:
        # X-Forwarded-For/-Proto only from the configured proxies (the app's own rule, so it
        # holds however the app is served; ``serve`` turns uvicorn's off).
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    return app
