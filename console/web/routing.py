"""The route class every page uses: errors become pages, a missing session becomes a redirect.

Requests made by the pages' scripts (header ``X-Proxima-Fetch: 1``) get JSON instead, so a
poll never swaps an HTML error page into the one being watched.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlencode

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.routing import APIRoute

from console.errors import ConsoleError
from console.web.deps import get_web, save_session
from console.web.errors import PageError, SignInRequired
from contracts.vocabulary import ErrorReason

__all__ = ["FETCH_HEADER", "PageRoute", "error_page"]

FETCH_HEADER = "x-proxima-fetch"

_TITLES = {
    400: "Bad request",
    401: "Sign-in needed",
    403: "Not allowed",
    404: "Not found",
    409: "Refused",
    413: "Too large",
    415: "Unsupported form",
    422: "Invalid request",
    504: "Timed out",
}


def _is_fetch(request: Request) -> bool:
    return request.headers.get(FETCH_HEADER) == "1"


def error_page(request: Request, status: int, reason: ErrorReason, message: str) -> Response:
    if _is_fetch(request):
        return JSONResponse({"reason": reason, "message": message}, status_code=status)
    return get_web(request).templates.render(
        request,
        "error.html",
        status_code=status,
        title=_TITLES.get(status, "Error"),
        code=status,
        reason=reason,
        message=message,
        viewer=getattr(request.state, "viewer", None),
    )


class PageRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await answer(request)
            finally:
                await save_session(request)

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired as exc:
                if _is_fetch(request):
                    return JSONResponse(
                        {
                            "reason": exc.reason or ErrorReason.SIGNED_OUT,
                            "message": "sign in again",
                        },
                        status_code=401,
                    )
                query: dict[str, str] = {"next": exc.next_path}
                if exc.reason:
                    query["reason"] = exc.reason
                return RedirectResponse(f"/sign-in?{urlencode(query)}", status_code=303)
            except PageError as exc:
                return error_page(request, exc.status, exc.reason, exc.message)
            except RequestValidationError as exc:
                # a hand-made query (``/agents?status=nope``): the page says which, as the API
                shown = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc'][1:]) or 'query'}: {e['msg']}"
                    for e in list(exc.errors())[:5]
                )
                return error_page(request, 422, ErrorReason.INVALID_REQUEST, shown)
            except ConsoleError as exc:
                return error_page(request, exc.status, exc.reason, exc.message)

        return route
