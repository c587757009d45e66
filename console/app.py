"""The FastAPI application. ``create_app`` builds it; nothing happens at import time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from console.api.routes import (
    api_tokens,
    artifacts,
    audit,
    clusters,
    enroll,
    fleet,
    install_tokens,
    rollouts,
)
from console.core.settings import ConsoleSettings
from console.errors import ConsoleError, TooManyRequestsError
from console.runtime import ConsoleRuntime
from console.web import mount as mount_web
from contracts import VERSION


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
    return JSONResponse(
        {"reason": "request_too_large", "message": f"request body is larger than {limit} bytes"},
        status_code=413,
    )


def _validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg')}")
    return "; ".join(parts)


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
        return JSONResponse(
            {
                "reason": "malformed_json" if malformed else "invalid_request",
                "message": _validation_message(errors),
                "errors": json.loads(json.dumps(errors, default=str)),
            },
            status_code=400 if malformed else 422,
        )

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": VERSION, "nats": runtime.nats_url}

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    for module in (enroll, fleet, install_tokens, api_tokens, rollouts, artifacts, clusters, audit):
        app.include_router(module.router)
    mount_web(app, runtime)
    app.add_middleware(
        BodyLimit,
        limit=settings.max_request_bytes,
        large={"/api/v1/artifacts": settings.artifact_max_bytes},
    )
    return app
