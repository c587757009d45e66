"""Outage transitions of one dependency (the database, NATS): one log line when it goes down,
one when it is back, never a traceback per request or per batch.

Every caller reports what it saw (:meth:`Dependency.failed`, :meth:`Dependency.ok`); the
dependency logs only the transitions and keeps ``up_since`` for readiness and for the rollout
timeout sweep (a target's silence is evidence only once the Console could hear it).

:class:`WriteStreak` is the ingester's own evidence: a database that answers ``SELECT 1`` but
takes no write (locked by another writer, read-only after a failover, a disk full) records
nothing for anyone; ``/readyz`` fails once that has lasted its window."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from console.core.clock import utcnow

__all__ = ["Dependency", "WriteStreak", "describe"]

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


class WriteStreak:
    """Whether the ingester's writes fail for everyone, and since when: a write that failed
    whole (an outage, every row refused), or one still running, starts the streak; a write
    that commits anything ends it. :meth:`failing` names it once it is ``window`` seconds old,
    so one short outage does not flap readiness."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._attempt: float | None = None
        self._failing: float | None = None
        self._problem = ""

    def started(self) -> None:
        self._attempt = self._clock()

    def succeeded(self) -> None:
        self._attempt = self._failing = None

    def failed(self, problem: str) -> None:
        if self._failing is None:
            self._failing = self._attempt if self._attempt is not None else self._clock()
        self._attempt, self._problem = None, problem

    def failing(self) -> str | None:
        """Why writes have failed (or hung) for at least ``window`` seconds, else None."""
        starts = [t for t in (self._failing, self._attempt) if t is not None]
        if not starts:
            return None
        lasted = self._clock() - min(starts)
        if lasted < self.window:
            return None
        why = self._problem if self._failing is not None else "a write is still running"
        return f"no agent message written for {lasted:.0f} s ({why})"
