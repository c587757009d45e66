"""Per-agent NATS permissions, enforced by the server itself.

The Console renders one ``authorization`` block — an nkey user per live agent identity, allowed
to publish only under ``proxima.agent.<id>.>`` and to subscribe only to ``proxima.cmd.<id>``
— writes it where the server includes it, and tells the server to reload. nats-server applies a
reload to live connections: a user that disappears (released, rotated away, revoked) is
disconnected at once, which is how release, rotation and revocation take effect on the wire.

Reloads are coalesced: any number of changes that arrive while one reload runs are applied by
the next one, and every caller of :meth:`NatsAuthorizer.apply` returns only once a reload that
includes its change has been confirmed by the server. See ``docs/nats.md`` for why this design
was chosen over auth_callout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prometheus_client import Histogram

from contracts import subjects

log = logging.getLogger(__name__)

RELOAD_SECONDS = Histogram(
    "proxima_nats_reload_seconds",
    "Signal to confirmed nats-server configuration reload",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


@dataclass(frozen=True, slots=True)
class AgentUser:
    agent_id: str
    public_key: str


class Reloader(Protocol):
    async def reload(self) -> None: ...


def render_authorization(console_public_key: str, users: list[AgentUser]) -> str:
    lines = ["authorization {", "  users = ["]
    lines.append(f"    {{nkey: {json.dumps(console_public_key)}}}")
    for user in sorted(users, key=lambda u: u.agent_id):
        pub = json.dumps(subjects.agent_publish_allow(user.agent_id))
        sub = json.dumps(subjects.agent_subscribe_allow(user.agent_id))
        lines.append(
            f"    {{nkey: {json.dumps(user.public_key)}, permissions: "
            f"{{publish: {{allow: {pub}}}, subscribe: {{allow: {sub}}}}}}}"
        )
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


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
        console_public_key: str,
        load_users: Callable[[], Awaitable[list[AgentUser]]],
        reloader: Reloader,
    ) -> None:
        self._auth_file = auth_file
        self._console_public_key = console_public_key
        self._load_users = load_users
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
        users = await self._load_users()
        write_atomically(self._auth_file, render_authorization(self._console_public_key, users))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="nats-authorizer")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def apply(self, wait_seconds: float = 30.0) -> None:
        """Return once the server enforces the identities as the database holds them now."""
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
        current = self._auth_file.read_text() if self._auth_file.exists() else ""
        while True:
            await self._wake.wait()
            self._wake.clear()
            target = self._requested
            try:
                users = await self._load_users()
                text = render_authorization(self._console_public_key, users)
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
