"""Everything a running Console holds: the database and its units of work, NATS (embedded or
external, its accounts and links: ``fleet_nats``), the heartbeat ingester and the command
sender.

``ConsoleRuntime`` is the ``ServiceRuntime`` the services run on: ``units`` runs their database
work, and the methods below are the effects they register to run after commit."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import nkeys
from pydantic import TypeAdapter
from sqlalchemy.engine import Engine

from console.core.clock import utcnow
from console.core.db import make_engine, migrate
from console.core.files import private_dir, private_file
from console.core.outages import Dependency
from console.core.settings import ConsoleSettings
from console.errors import ServiceUnavailableError
from console.ingest import ChunkLimits, Ingester
from console.runtime.fleet_nats import FleetNats
from console.services.maintenance import Maintenance
from console.services.rate_limits import RateLimits
from console.services.unit_of_work import UnitsOfWork
from contracts import subjects
from contracts.bounds import Identifier
from contracts.messages import Command, CommandKind

log = logging.getLogger(__name__)


class ConsoleStartupError(RuntimeError):
    pass


def load_or_create_seed(path: Path) -> bytes:
    """The Console's own NATS nkey, kept beside its data (0600)."""
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    seed: bytes = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(seed)
    return seed


def _private_data(data_dir: Path) -> None:
    """The data directory and the hosted builds only the Console's user can read (older
    versions left them 0755/0644)."""
    private_dir(data_dir)
    store = data_dir / "artifacts"
    if store.exists():
        private_dir(store)
        for stored in store.iterdir():
            private_file(stored)


class ConsoleRuntime:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.database_url = settings.resolved_database_url()
        self.engine: Engine = make_engine(
            self.database_url,
            pool_size=settings.database_pool_size,
            max_overflow=settings.database_max_overflow,
        )
        self.units = UnitsOfWork(
            self.engine, serialize_writes=self.database_url.startswith("sqlite")
        )
        self.ingester = Ingester(
            units=self.units,
            flush_seconds=settings.heartbeat_flush_seconds,
            batch_max=settings.heartbeat_batch_max,
            chunk_limits=ChunkLimits(
                max_chunks=settings.inventory_max_pending_chunks,
                max_bytes=settings.inventory_max_pending_bytes,
                max_bytes_total=settings.inventory_max_pending_bytes_total,
                max_age_seconds=settings.inventory_chunk_max_age_seconds,
                max_inflated_bytes=settings.inventory_max_inflated_bytes,
            ),
            row_attempts=settings.ingest_row_attempts,
            write_failure_seconds=settings.ready_write_failure_seconds,
        )
        self.fleet_nats = FleetNats(settings, self.units, self.ingester)
        self.rate_limits = RateLimits(settings, self.units)
        self.nats_url = ""
        self.rotation_waiters: dict[str, asyncio.Event] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.maintenance = Maintenance(self, listening_since=lambda: self.listening_since)
        self.fleet_nats.on_reconnected = self._reconnected

    @property
    def nats(self) -> Dependency:
        """The fleet's NATS as a dependency (up since, or the problem); the database's is
        ``units.database``."""
        return self.fleet_nats.health

    @property
    def listening_since(self) -> datetime | None:
        """Since when the Console could hear every result (NATS up and the database writable),
        ``None`` while it cannot: the rollout timeout sweep waits on it."""
        nats_up, db_up = self.nats.up_since, self.units.database.up_since
        if nats_up is None or db_up is None:
            return None
        return max(nats_up, db_up)

    async def readiness(self) -> dict[str, dict[str, Any]]:
        """``/readyz``: the database (a ``SELECT 1`` now, and the ingester's writes not failing
        for ``ready_write_failure_seconds``) and NATS (the system connection)."""
        try:
            await self.units.run(lambda uow: uow.session.connection().exec_driver_sql("SELECT 1"))
        except ServiceUnavailableError:
            pass  # recorded on ``units.database``
        nc = self.fleet_nats.sys_nc
        if nc is None or not nc.is_connected:
            self.nats.failed("not connected")
        else:
            self.nats.ok()
        checks = {dep.name: _detail(dep) for dep in (self.units.database, self.nats)}
        writes_failing = self.ingester.writes.failing()
        if writes_failing is not None:  # it answers reads, but takes no write
            checks["database"] = {**checks["database"], "ok": False, "problem": writes_failing}
        return checks

    def backend_url(self, request_base_url: str) -> str:
        """What agents should use: PROXIMA_PUBLIC_URL, else the address a request came in on."""
        return (self.settings.public_url or request_base_url).rstrip("/")

    @property
    def agent_nats_url(self) -> str:
        return self.settings.nats_public_url or self.nats_url

    async def start(self) -> None:
        s = self.settings
        _private_data(s.data_dir)
        await asyncio.to_thread(lambda: migrate(self.database_url, data_dir=s.data_dir))
        await self.fleet_nats.start(load_or_create_seed(s.data_dir / "console.nk"))
        self.nats_url = self.fleet_nats.url
        self.ingester.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="rollout-sweeper")
        log.info("console nats connected to %s", self.nats_url)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.ingester.stop()
        await self.fleet_nats.stop()
        self.engine.dispose()

    async def agent_jwt(self, agent_id: str, public_key: str, environment_id: str) -> str:
        """A user JWT signed by the environment's account (created and pushed on first use)."""
        return await self.fleet_nats.agent_jwt(agent_id, public_key, environment_id)

    async def apply_identities(self) -> None:
        """Return once NATS refuses every key the database has taken away."""
        await self.fleet_nats.apply()

    async def send_commands(
        self, sends: list[tuple[str, str]], kind: CommandKind, args: dict[str, object]
    ) -> None:
        """Publish one command per (agent_id, command_id); see ``FleetNats.publish`` for what
        returning means."""
        messages = [
            (agent_id, subjects.commands(agent_id), payload)
            for (agent_id, _c), payload in zip(
                sends, command_payloads([c for _a, c in sends], kind, args), strict=True
            )
        ]
        await self.fleet_nats.publish(messages)

    async def _sweep(self) -> None:
        """The background work (``services.maintenance``: leased, so N replicas never double
        it): rollout timeouts, rollout drivers, command resends, SQLite statistics."""
        while True:
            await asyncio.sleep(self.settings.rollout_sweep_seconds)
            await self.maintenance.tick(time.monotonic())

    async def _reconnected(self) -> None:
        """NATS came back: commands published before may be lost with the server; send again
        every one still without a result (same ids: the agents dedupe)."""
        try:
            await self.maintenance.resend_now()
        except ServiceUnavailableError:
            pass  # the database is down: the periodic sweep resends once it is back
        except Exception:
            log.exception("resending commands after the NATS reconnect failed; the sweep retries")

    async def send_command(self, agent_id: str, kind: CommandKind, args: dict[str, object]) -> str:
        """One command with a fresh id (rollouts derive theirs: see ``send_commands``)."""
        command_id = uuid.uuid4().hex
        await self.send_commands([(agent_id, command_id)], kind, args)
        return command_id


_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


def command_payloads(
    command_ids: list[str], kind: CommandKind, args: dict[str, object]
) -> list[bytes]:
    """The serialised ``Command`` for each id: one validated and serialised, the others the
    same bytes with their own id (each id validated as ``Command`` would: ``Identifier`` admits
    no character JSON escapes). A wave of 20,000 costs one model dump, not 20,000."""
    if not command_ids:
        return []
    issued = utcnow()
    first = Command(command_id=command_ids[0], kind=kind, issued_at=issued, args=args)
    template = first.model_dump_json().encode()
    head = b'{"command_id":"'
    lead = head + command_ids[0].encode() + b'"'
    if not template.startswith(lead):  # not the expected layout: one dump per command
        return [template] + [
            first.model_copy(update={"command_id": _IDENTIFIER.validate_python(c)})
            .model_dump_json()
            .encode()
            for c in command_ids[1:]
        ]
    rest = template[len(lead) - 1 :]
    return [template] + [
        head + _IDENTIFIER.validate_python(c).encode() + rest for c in command_ids[1:]
    ]


def _detail(dep: Dependency) -> dict[str, Any]:
    since = dep.up_since
    return {
        "ok": dep.up,
        **({"since": since.isoformat()} if since else {}),
        **({"problem": dep.problem} if dep.problem else {}),
    }
