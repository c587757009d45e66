"""Jinja2 pages: one environment, built when the app is made, with the filters the pages share.

Every page is sent with a strict Content-Security-Policy: scripts and styles only from
``/static``, nothing inline, no frames, forms only to this Console.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from console.web.forms import CSRF_FIELD
from contracts.vocabulary import RolloutState, Scope
from rollout_policy import EventKind

__all__ = ["SECURITY_HEADERS", "Templates", "duration", "when"]

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
        "object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def when(value: datetime | None, missing: str = "—") -> Markup:
    """An aware datetime as ``2026-05-02 12:03:04 UTC`` in a <time> element."""
    if value is None:
        return escape(missing)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return Markup('<time datetime="{}">{}</time>').format(
        value.isoformat(timespec="seconds"), value.strftime("%Y-%m-%d %H:%M:%S UTC")
    )


def duration(seconds: float | None, missing: str = "—") -> str:
    """``4 s``, ``12 min``, ``3 h``, ``2 d``: the order of magnitude an operator reads."""
    if seconds is None:
        return missing
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def ago(value: datetime | None, missing: str = "never", now: datetime | None = None) -> str:
    """``just now``, ``4 s ago``, ``12 min ago``: whole units, never ``0.52 s ago``."""
    if value is None:
        return missing
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    if seconds < 1:
        return "just now"
    if seconds < 10:
        return f"{seconds:.0f} s ago"
    return f"{duration(seconds)} ago"


class Templates:
    def __init__(self, directory: Path, *, static_version: str) -> None:
        self.env = Environment(
            loader=FileSystemLoader(str(directory)),
            autoescape=select_autoescape(("html",), default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(when=when, duration=duration, ago=ago)
        # The vocabulary the pages compare with (``viewer.can(Scope.TOKENS_WRITE)``,
        # ``Event.RESUME in moves``), never its text.
        self.env.globals.update(
            static=lambda path: f"/static/{path}?v={static_version}",
            csrf_field=CSRF_FIELD,
            Scope=Scope,
            State=RolloutState,
            Event=EventKind,
        )

    def render(
        self, request: Request, template: str, *, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        context.setdefault("viewer", None)
        context.setdefault("flashes", [])
        context.setdefault("active", "")
        context["path"] = request.url.path
        html = self.env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)

    def fragment(self, template: str, **context: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(**context)
        return HTMLResponse(html, headers=SECURITY_HEADERS)
