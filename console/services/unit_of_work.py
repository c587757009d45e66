"""The unit of work: every service call's database work, and what it does outside the database.

One ``UnitOfWork`` is one session and one transaction, run in a worker thread (the database
driver blocks), holding the SQLite writer lock when it writes. Effects that reach outside the
database — NATS identity changes and revocations, command sends, Prefect start/resume — are
registered with ``after_commit`` and run, in order, on the event loop only once the transaction
has committed: a rolled-back unit never publishes anything.

A database that cannot be reached (connection refused or lost, a pool timeout) is reported to
``UnitsOfWork.database`` (one log line per outage transition) and raised as
:class:`~console.errors.ServiceUnavailableError` (503 ``database_unavailable``), never as a 500.

``ServiceRuntime`` is what the services need from the running Console (``console.runtime``
implements it); services never import the runtime itself.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, TypeVar

import anyio.to_thread
from sqlalchemy import exc as db_errors
from sqlalchemy.engine import Engine
from sqlmodel import Session

from console.core.outages import Dependency
from console.core.settings import ConsoleSettings
from console.errors import ServiceUnavailableError
from contracts.messages import CommandKind
from contracts.vocabulary import ErrorReason

__all__ = [
    "Effect",
    "ServiceRuntime",
    "UnitOfWork",
    "UnitsOfWork",
    "database_unreachable",
]

T = TypeVar("T")
Effect = Callable[[], Awaitable[object]]


def database_unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached (rather than a bug or a refusal)."""
    if isinstance(error, db_errors.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(
        error, db_errors.OperationalError | db_errors.InterfaceError | db_errors.TimeoutError
    )


class UnitOfWork:
    """The session of one service call, and the effects to run once it has committed."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.effects: list[Effect] = []

    def after_commit(self, effect: Effect) -> None:
        self.effects.append(effect)


class _NoLock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *_exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


class UnitsOfWork:
    """Runs units of work against one engine; owns the SQLite writer lock."""

    def __init__(self, engine: Engine, *, serialize_writes: bool) -> None:
        self.engine = engine
        # SQLite has one writer at a time; queueing writers here instead of in SQLite's busy
        # handler (which sleeps in coarse steps) keeps enrollment latency flat under load.
        self._write_lock = threading.Lock() if serialize_writes else None
        # ... and writers coming from the event loop queue on the loop first, in arrival order
        # (``asyncio.Lock`` is FIFO; a contended ``threading.Lock`` is not, which gave the
        # enrollment benchmark its long tail), so one worker thread at a time waits for the
        # writer lock instead of every request's thread.
        self._loop_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self.database = Dependency("database")

    @property
    def serializes_writes(self) -> bool:
        """Whether the database takes one writer at a time (SQLite), queued here."""
        return self._write_lock is not None

    def writer(self) -> AbstractContextManager[object]:
        return self._write_lock if self._write_lock is not None else nullcontext()

    def _loop_writer(self) -> asyncio.Lock | _NoLock:
        if self._write_lock is None:
            return _NO_LOCK
        loop = asyncio.get_running_loop()
        lock = self._loop_writers.get(loop)
        if lock is None:
            lock = self._loop_writers[loop] = asyncio.Lock()
        return lock

    def run_sync(
        self,
        work: Callable[[UnitOfWork], T],
        *,
        write: bool,
        commit_on: tuple[type[BaseException], ...] = (),
    ) -> tuple[T, list[Effect]]:
        """Run ``work`` in this thread and commit; ``commit_on`` exceptions commit, then raise."""
        with (
            self.writer() if write else nullcontext(),
            Session(self.engine, expire_on_commit=False) as session,
        ):
            unit = UnitOfWork(session)
            try:
                result = work(unit)
            except commit_on:
                session.commit()
                raise
            session.commit()
            return result, unit.effects

    async def run(
        self,
        work: Callable[[UnitOfWork], T],
        *,
        write: bool = False,
        commit_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Hop to a worker thread for the transaction, then run its effects here, in order."""
        try:
            async with self._loop_writer() if write else _NO_LOCK:
                result, effects = await anyio.to_thread.run_sync(
                    lambda: self.run_sync(work, write=write, commit_on=commit_on)
                )
        except Exception as e:
            if not database_unreachable(e):
                raise
            self.database.failed(e)
            raise ServiceUnavailableError(
                ErrorReason.DATABASE_UNAVAILABLE,
                # The detail (hosts, users) is for the log, not for API callers.
                "the Console's database is unavailable; retry later",
            ) from e
        self.database.ok()
        for effect in effects:
            await effect()
        return result


class ServiceRuntime(Protocol):
    """The running Console, as the services see it."""

    settings: ConsoleSettings
    units: UnitsOfWork
    rotation_waiters: dict[str, asyncio.Event]

    @property
    def agent_nats_url(self) -> str: ...

    async def agent_jwt(self, agent_id: str, public_key: str, environment_id: str) -> str: ...

    async def apply_identities(self) -> None: ...

    async def send_commands(
        self, sends: list[tuple[str, str]], kind: CommandKind, args: dict[str, object]
    ) -> None: ...

    async def send_command(
        self, agent_id: str, kind: CommandKind, args: dict[str, object]
    ) -> str: ...
