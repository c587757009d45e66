"""Web sessions: held in the Console's memory, named by a signed, HttpOnly cookie.

The browser never holds the API token: it holds a random session id signed with a key made when
the Console starts. The session keeps the token the operator signed in with, so every request is
authenticated afresh with ``console.auth.authenticate`` — revoking or expiring the API token ends
its web sessions at their next request. A Console restart signs everyone out (the sessions and the
key are gone); several Console replicas behind one address need sticky sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "ABSOLUTE_SECONDS",
    "IDLE_SECONDS",
    "SESSION_COOKIE",
    "SIGN_IN_COOKIE",
    "Flash",
    "SessionStore",
    "WebSession",
]

SESSION_COOKIE = "proxima_session"
SIGN_IN_COOKIE = "proxima_sign_in"
IDLE_SECONDS = 2 * 3600.0
ABSOLUTE_SECONDS = 12 * 3600.0
MAX_SESSIONS = 10_000


@dataclass(frozen=True, slots=True)
class Flash:
    """A message for the next page this session renders. ``reason`` is the API's, verbatim."""

    kind: str  # ok, error or info
    message: str
    reason: str | None = None


@dataclass(slots=True)
class WebSession:
    id: str
    token: str = field(repr=False)
    csrf: str = field(repr=False)
    created: float
    seen: float
    flashes: list[Flash] = field(default_factory=list)
    # Secrets shown to this session only (install tokens minted here): never stored elsewhere.
    reveal: dict[str, str] = field(default_factory=dict, repr=False)

    def flash(self, kind: str, message: str, reason: str | None = None) -> None:
        self.flashes.append(Flash(kind, message, reason))

    def take_flashes(self) -> list[Flash]:
        taken, self.flashes = self.flashes, []
        return taken


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class SessionStore:
    """Sessions by id, with idle and absolute lifetimes. Thread-safe: sync routes run in a pool."""

    def __init__(
        self,
        *,
        key: bytes | None = None,
        idle_seconds: float = IDLE_SECONDS,
        absolute_seconds: float = ABSOLUTE_SECONDS,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._key = key or secrets.token_bytes(32)
        self._idle = idle_seconds
        self._absolute = absolute_seconds
        self._max = max_sessions
        self._clock = clock
        self._sessions: dict[str, WebSession] = {}
        self._lock = threading.Lock()

    def sign(self, value: str) -> str:
        mac = hmac.new(self._key, value.encode(), hashlib.sha256).digest()
        return f"{value}.{_b64(mac)}"

    def unsign(self, signed: str | None) -> str | None:
        if not signed or "." not in signed:
            return None
        value, _, _mac = signed.rpartition(".")
        return value if hmac.compare_digest(self.sign(value), signed) else None

    def create(self, token: str) -> WebSession:
        now = self._clock()
        session = WebSession(
            id=secrets.token_urlsafe(32),
            token=token,
            csrf=secrets.token_urlsafe(32),
            created=now,
            seen=now,
        )
        with self._lock:
            self._expire(now)
            if len(self._sessions) >= self._max:  # drop the least recently seen
                oldest = min(self._sessions.values(), key=lambda s: s.seen)
                del self._sessions[oldest.id]
            self._sessions[session.id] = session
        return session

    def cookie_value(self, session: WebSession) -> str:
        return self.sign(session.id)

    def get(self, cookie: str | None) -> WebSession | None:
        session_id = self.unsign(cookie)
        if session_id is None:
            return None
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.seen > self._idle or now - session.created > self._absolute:
                del self._sessions[session_id]
                return None
            session.seen = now
            return session

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _expire(self, now: float) -> None:
        stale = [
            s.id
            for s in self._sessions.values()
            if now - s.seen > self._idle or now - s.created > self._absolute
        ]
        for session_id in stale:
            del self._sessions[session_id]
