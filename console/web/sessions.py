"""Web sessions: rows in the Console's database (``web_session``), named by an HttpOnly cookie.

The browser never holds the API token: its cookie holds a random 256-bit secret, and the row is
named by that secret's SHA-256, so neither a reader of the database nor a copy of it can sign in.
The row keeps the id of the API token the operator signed in with, and every request checks that
token afresh (``console.auth``) — revoking or expiring the token ends its web sessions at their
next request. Sessions survive a Console restart and work on every replica sharing the database.

Each token holds at most ``PROXIMA_WEB_SESSIONS_PER_TOKEN`` sessions: signing in past that ends
*that token's* oldest session, never another token's. Sessions end after
``PROXIMA_WEB_SESSION_IDLE_SECONDS`` unused (``seen_at`` is refreshed at most once a minute) or
``PROXIMA_WEB_SESSION_ABSOLUTE_SECONDS`` after sign-in; signing out deletes the row.

Secrets shown once to a session (tokens minted on a page) are sealed with a key derived from the
cookie's secret (NaCl secretbox); the form CSRF token is an HMAC of it, never stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import nacl.exceptions
import nacl.secret
from sqlalchemy import delete, func
from sqlmodel import col, select

from console.core.clock import utcnow
from console.core.settings import ConsoleSettings
from console.models import WebSession as SessionRow
from console.services.unit_of_work import UnitOfWork, UnitsOfWork

__all__ = ["SESSION_COOKIE", "SIGN_IN_COOKIE", "Flash", "SessionStore", "WebSession"]

SESSION_COOKIE = "proxima_session"
SIGN_IN_COOKIE = "proxima_sign_in"
SEEN_EVERY = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Flash:
    """A message for the next page this session renders. ``reason`` is the API's, verbatim."""

    kind: str  # ok, error or info
    message: str
    reason: str | None = None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def session_id(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(slots=True)
class WebSession:
    """One request's view of a session; ``SessionStore.save`` writes back what changed."""

    id: str
    token_id: str
    secret: str = field(repr=False)
    seen: datetime
    flashes: list[Flash] = field(default_factory=list)
    # Secrets shown to this session only (install tokens minted here): sealed when stored.
    reveal: dict[str, str] = field(default_factory=dict, repr=False)
    dropped: bool = False
    _saved: tuple[list[Flash], dict[str, str]] = field(default_factory=lambda: ([], {}), repr=False)

    @property
    def csrf(self) -> str:
        return _b64(hmac.new(self.secret.encode(), b"proxima-csrf", hashlib.sha256).digest())

    def flash(self, kind: str, message: str, reason: str | None = None) -> None:
        self.flashes.append(Flash(kind, message, reason))

    def take_flashes(self) -> list[Flash]:
        taken, self.flashes = self.flashes, []
        return taken

    def changed(self) -> bool:
        return (self.flashes, self.reveal) != self._saved

    def mark_saved(self) -> None:
        self._saved = (list(self.flashes), dict(self.reveal))


def _box(secret: str) -> nacl.secret.SecretBox:
    return nacl.secret.SecretBox(hashlib.sha256(b"proxima-reveal:" + secret.encode()).digest())


def _seal(secret: str, reveal: dict[str, str]) -> bytes | None:
    return bytes(_box(secret).encrypt(json.dumps(reveal).encode())) if reveal else None


def _open(secret: str, sealed: bytes | None) -> dict[str, str]:
    if not sealed:
        return {}
    try:
        opened: dict[str, str] = json.loads(_box(secret).decrypt(sealed))
    except (nacl.exceptions.CryptoError, ValueError):
        return {}
    return opened


class SessionStore:
    """Sessions in the database; every method is one unit of work."""

    def __init__(self, units: UnitsOfWork, settings: ConsoleSettings) -> None:
        self._units = units
        self.per_token = settings.web_sessions_per_token
        self.idle = timedelta(seconds=settings.web_session_idle_seconds)
        self.absolute = timedelta(seconds=settings.web_session_absolute_seconds)

    async def create(self, token_id: str) -> str:
        """A new session for ``token_id``; the cookie value that names it."""
        secret = secrets.token_urlsafe(32)
        now = utcnow()
        row = SessionRow(
            id=session_id(secret),
            token_id=token_id,
            created_at=now,
            seen_at=now,
            expires_at=now + self.absolute,
        )

        def work(uow: UnitOfWork) -> None:
            self._purge(uow, now)
            self._make_room(uow, token_id)
            uow.session.add(row)

        await self._units.run(work, write=True)
        return secret

    def _purge(self, uow: UnitOfWork, now: datetime) -> None:
        uow.session.execute(
            delete(SessionRow).where(
                (col(SessionRow.expires_at) <= now) | (col(SessionRow.seen_at) <= now - self.idle)
            )
        )

    def _make_room(self, uow: UnitOfWork, token_id: str) -> None:
        """Drop this token's oldest sessions so one more fits; no other token's."""
        held = uow.session.exec(
            select(func.count()).select_from(SessionRow).where(SessionRow.token_id == token_id)
        ).one()
        excess = held - self.per_token + 1
        if excess <= 0:
            return
        oldest = uow.session.exec(
            select(SessionRow.id)
            .where(SessionRow.token_id == token_id)
            .order_by(col(SessionRow.created_at), col(SessionRow.id))
            .limit(excess)
        ).all()
        uow.session.execute(delete(SessionRow).where(col(SessionRow.id).in_(list(oldest))))

    def load(self, uow: UnitOfWork, cookie: str | None) -> WebSession | None:
        """The live session the cookie names (inside the caller's unit of work), or None."""
        if not cookie or len(cookie) > 128:
            return None
        row = uow.session.get(SessionRow, session_id(cookie))
        now = utcnow()
        if row is None or row.expires_at <= now or row.seen_at <= now - self.idle:
            return None
        session = WebSession(
            id=row.id,
            token_id=row.token_id,
            secret=cookie,
            seen=row.seen_at,
            flashes=[Flash(**f) for f in row.flashes],
            reveal=_open(cookie, row.sealed),
        )
        session.mark_saved()
        return session

    async def save(self, session: WebSession) -> None:
        """Write back flashes and sealed secrets when they changed, and refresh ``seen_at`` at
        most once a minute. A session dropped meanwhile (signed out elsewhere) stays gone."""
        now = utcnow()
        if session.dropped or not (session.changed() or now - session.seen >= SEEN_EVERY):
            return

        def work(uow: UnitOfWork) -> None:
            row = uow.session.get(SessionRow, session.id)
            if row is None:
                return
            row.flashes = flashes_json(session.flashes)
            row.sealed = _seal(session.secret, session.reveal)
            row.seen_at = now
            uow.session.add(row)

        await self._units.run(work, write=True)
        session.mark_saved()
        session.seen = now

    async def drop(self, session: WebSession) -> None:
        session.dropped = True
        await self._units.run(
            lambda uow: uow.session.execute(
                delete(SessionRow).where(col(SessionRow.id) == session.id)
            ),
            write=True,
        )

    async def count(self, token_id: str | None = None) -> int:
        def work(uow: UnitOfWork) -> int:
            query = select(func.count()).select_from(SessionRow)
            if token_id is not None:
                query = query.where(SessionRow.token_id == token_id)
            return int(uow.session.exec(query).one())

        return await self._units.run(work)


def flashes_json(flashes: list[Flash]) -> list[dict[str, Any]]:
    return [{"kind": f.kind, "message": f.message, "reason": f.reason} for f in flashes]
