"""Outage transitions of one dependency (the database, NATS): one log line when it goes down,
one when it is back, never a traceback per request or per batch.

Every caller reports what it saw (:meth:`Dependency.failed`, :meth:`Dependency.ok`); the
dependency logs only the transitions and keeps ``up_since`` for readiness and for the rollout
timeout sweep (a target's silence is evidence only once the Console could hear it)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

from console.core.clock import utcnow

__all__ = ["Dependency", "describe"]

log = logging.getLogger(__name__)


def describe(error: BaseException) -> str:
    """One line: the exception's class and first line, bounded."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{error.__class__.__name__}: {first}"[:300]


class Dependency:
    """Up or down, since when, and why; thread-safe (units of work run in worker threads)."""

    def __init__(self, name: str, *, up: bool = True) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._up = up
        self._ever_up = up  # coming up the first time is not "available again"
        self._since: datetime = utcnow()
        self._down_at = time.monotonic()
        self.problem: str | None = None

    @property
    def up(self) -> bool:
        return self._up

    @property
    def up_since(self) -> datetime | None:
        """When it last came up; ``None`` while down."""
        return self._since if self._up else None

    def failed(self, error: BaseException | str) -> None:
        text = error if isinstance(error, str) else describe(error)
        with self._lock:
            self.problem = text
            if not self._up:
                return
            self._up, self._since, self._down_at = False, utcnow(), time.monotonic()
        log.warning("%s unavailable: %s", self.name, text)

    def ok(self) -> None:
        if self._up:
            return
        with self._lock:
            if self._up:
                return
            self._up, self._since, self.problem = True, utcnow(), None
            lasted = time.monotonic() - self._down_at
            first, self._ever_up = not self._ever_up, True
        if not first:
            log.warning("%s available again after %.1f s", self.name, lasted)
