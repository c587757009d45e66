"""Keeping the server's trust configuration in step with the database.

Agents hold signed user JWTs (see ``nats_jwt.py``), so a new identity needs no server change.
When a key is taken away the Console adds it to the fleet account's revocations, rewrites the
file the server includes, sends ``SIGHUP`` and waits until ``/varz`` shows the reload: from then
on the key is refused, and its live connection has been cut.

Reloads are coalesced: changes that arrive while one runs are applied together by the next, and
each caller of :meth:`NatsAuthorizer.apply` returns once a reload that includes its change is
confirmed. See ``docs/nats.md`` for the design and its history.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from prometheus_client import Histogram

from console.nats.jwt import NatsAuthority

log = logging.getLogger(__name__)

RELOAD_SECONDS = Histogram(
    "proxima_nats_reload_seconds",
    "Signal to confirmed nats-server configuration reload",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


class Reloader(Protocol):
    async def reload(self) -> None: ...


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


class NatsAuthorizer:
    def __init__(
        self,
        *,
        auth_file: Path,
        authority: NatsAuthority,
        load_revocations: Callable[[], Awaitable[dict[str, int]]],
        reloader: Reloader | None = None,
    ) -> None:
        self._auth_file = auth_file
        self._authority = authority
        self._load_revocations = load_revocations
        self._reloader = reloader
        self._requested = 0
        self._applied = 0
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self.reloads = 0

    async def write_initial(self) -> None:
        """Render the file before the server starts so it never runs without it."""
        text = self._authority.render_config(await self._load_revocations())
        write_atomically(self._auth_file, text)

    def start(self, reloader: Reloader) -> None:
        self._reloader = reloader
        self._task = asyncio.create_task(self._run(), name="nats-authorizer")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def apply(self, wait_seconds: float = 30.0) -> None:
        """Return once the server refuses every key the database has taken away."""
        self._requested += 1
        wanted = self._requested
        self._wake.set()
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(
                    lambda: self._applied >= wanted or self._failure is not None
                ),
                wait_seconds,
            )
        if self._applied < wanted and self._failure is not None:
            raise RuntimeError(f"nats authorization reload failed: {self._failure}")

    async def _run(self) -> None:
        assert self._reloader is not None
        current = self._auth_file.read_text() if self._auth_file.exists() else ""
        while True:
            await self._wake.wait()
            self._wake.clear()
            target = self._requested
            try:
                text = self._authority.render_config(await self._load_revocations())
                if text != current:
                    write_atomically(self._auth_file, text)
                    with RELOAD_SECONDS.time():
                        await self._reloader.reload()
                    current = text
                    self.reloads += 1
                self._failure = None
                self._applied = target
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving; the next change retries
                log.exception("nats authorization reload failed")
                self._failure = exc
            async with self._changed:
                self._changed.notify_all()
