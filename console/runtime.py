"""Everything a running Console holds: the database and its units of work, NATS (embedded or
external), the authorization file writer, the heartbeat ingester and the command sender.

``ConsoleRuntime`` is the ``ServiceRuntime`` the services run on: ``units`` runs their database
work, and the methods below are the effects they register to run after commit."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import nats
import nkeys
from nats.aio.client import Client as NatsClient
from sqlalchemy.engine import Engine
from sqlmodel import select

from console.core.clock import utcnow
from console.core.db import make_engine, migrate
from console.core.files import private_dir, private_file
from console.core.outages import Dependency
from console.core.settings import ConsoleSettings
from console.errors import ServiceUnavailableError
from console.ingest import ChunkLimits, Ingester
from console.models import NatsRevocation
from console.nats.authorization import NatsAuthorizer
from console.nats.connection_guard import ACCOUNT_EVENTS, ConnectionGuard
from console.nats.jwt import NatsAuthority, UserLimits
from console.nats.server import (
    VARZ_REQUEST,
    EmbeddedNats,
    MonitoredReloader,
    SystemAccountReloader,
)
from console.services.rate_limits import RateLimits
from console.services.repairs import clear_out_of_bounds
from console.services.rollouts.results import expire_overdue
from console.services.unit_of_work import UnitOfWork, UnitsOfWork
from contracts import subjects
from contracts.messages import Command, CommandKind

log = logging.getLogger(__name__)

AUTH_ERRORS = "$SYS.SERVER.*.CLIENT.AUTH.ERR"
# Console replicas share the ingest work: each message goes to one of them.
INGEST_QUEUE = "proxima-console-ingest"


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
        self.engine: Engine = make_engine(self.database_url)
        self.embedded: EmbeddedNats | None = None
        self.guard: ConnectionGuard | None = None
        self.reloader: MonitoredReloader | SystemAccountReloader | None = None
        self.nc: NatsClient | None = None
        self.sys_nc: NatsClient | None = None
        self.authorizer: NatsAuthorizer | None = None
        self.authority: NatsAuthority | None = None
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
        )
        self.rate_limits = RateLimits(settings)
        self.nats_url = ""
        self.rotation_waiters: dict[str, asyncio.Event] = {}
        self._sweeper: asyncio.Task[None] | None = None
        # The fleet connection (ingest, commands); the database's is ``units.database``.
        self.nats = Dependency("nats", up=False)

    def backend_url(self, request_base_url: str) -> str:
        """What agents should use: PROXIMA_PUBLIC_URL, else the address a request came in on."""
        return (self.settings.public_url or request_base_url).rstrip("/")

    @property
    def agent_nats_url(self) -> str:
        return self.settings.nats_public_url or self.nats_url

    async def _load_revocations(self) -> dict[str, int]:
        def query(uow: UnitOfWork) -> dict[str, int]:
            rows = uow.session.exec(
                select(NatsRevocation.public_key, NatsRevocation.revoked_at)
            ).all()
            return dict(rows)

        return await self.units.run(query)

    async def start(self) -> None:
        s = self.settings
        _private_data(s.data_dir)
        await asyncio.to_thread(migrate, self.database_url)
        await self.units.run(lambda uow: clear_out_of_bounds(uow.session), write=True)
        seed = load_or_create_seed(s.data_dir / "console.nk")
        self.authority = NatsAuthority.load_or_create(s.data_dir / "nats-keys")
        if s.nats_url is None:
            self.embedded = EmbeddedNats(
                workdir=s.data_dir / "nats", port=s.nats_port, max_payload=s.nats_max_payload
            )
            auth_file = self.embedded.auth_file
        else:
            if not (s.nats_auth_file and s.nats_pid_file and s.nats_monitor_url):
                raise ConsoleStartupError(
                    "PROXIMA_NATS_URL names an external server: also set PROXIMA_NATS_AUTH_FILE "
                    "(the file its config includes), PROXIMA_NATS_PID_FILE and "
                    "PROXIMA_NATS_MONITOR_URL so the Console can keep its trust configuration"
                )
            auth_file = s.nats_auth_file
        self.authorizer = NatsAuthorizer(
            auth_file=auth_file,
            authority=self.authority,
            load_revocations=self._load_revocations,
        )
        await self.authorizer.write_initial()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.start)
            self.nats_url = self.embedded.client_url
        else:
            assert s.nats_url
            self.nats_url = s.nats_url
        await self._connect(seed)
        if self.embedded is not None:
            self.reloader = self.embedded.reloader(self._varz)
        else:
            assert s.nats_pid_file and s.nats_monitor_url
            self.reloader = MonitoredReloader(pid=s.nats_pid_file, monitor_url=s.nats_monitor_url)
            await self.reloader.reload()
        self.authorizer.start(self.reloader)
        self.ingester.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="rollout-sweeper")
        log.info("console nats connected to %s", self.nats_url)

    async def _connect(self, seed: bytes) -> None:
        """The Console's two NATS users: its fleet user (ingest, commands) and its system-account
        user (refused connections, reload confirmations)."""
        assert self.authority is not None
        console_pub = nkeys.from_seed(bytearray(seed)).public_key.decode()
        console_jwt = self.authority.console_jwt(console_pub).encode()
        self.nc = await nats.connect(
            self.nats_url,
            nkeys_seed_str=seed.decode(),
            user_jwt_cb=lambda: console_jwt,
            name="proxima-console",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            disconnected_cb=self._nats_lost,
            reconnected_cb=self._nats_back,
        )
        self.nats.ok()
        await self.nc.subscribe(
            subjects.ALL_HEARTBEATS, queue=INGEST_QUEUE, cb=self.ingester.on_heartbeat
        )
        await self.nc.subscribe(
            subjects.ALL_METRICS, queue=INGEST_QUEUE, cb=self.ingester.on_metrics
        )
        await self.nc.subscribe(
            subjects.ALL_RESULTS, queue=INGEST_QUEUE, cb=self.ingester.on_result
        )
        await self.nc.subscribe(subjects.ALL_INVENTORY, cb=self.ingester.on_inventory)
        system_jwt = self.authority.system_user_jwt(console_pub).encode()
        self.sys_nc = await nats.connect(
            self.nats_url,
            nkeys_seed_str=seed.decode(),
            user_jwt_cb=lambda: system_jwt,
            name="proxima-console-system",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
        )
        await self.sys_nc.subscribe(AUTH_ERRORS, queue=INGEST_QUEUE, cb=self.ingester.on_auth_error)
        sys_nc = self.sys_nc
        self.guard = ConnectionGuard(
            limit=self.settings.nats_agent_max_connections,
            request=lambda subject, data: sys_nc.request(subject, data, timeout=2.0),
            exempt={console_pub},
        )
        await self.sys_nc.subscribe(ACCOUNT_EVENTS, cb=self.guard.on_event)

    async def _nats_lost(self) -> None:
        self.nats.failed("connection to the server lost; reconnecting")

    async def _nats_back(self) -> None:
        self.nats.ok()

    @property
    def listening_since(self) -> datetime | None:
        """Since when the Console could hear every result (NATS up and the database writable),
        ``None`` while it cannot: the rollout timeout sweep waits on it."""
        nats_up, db_up = self.nats.up_since, self.units.database.up_since
        if nats_up is None or db_up is None:
            return None
        return max(nats_up, db_up)

    async def readiness(self) -> dict[str, dict[str, Any]]:
        """``/readyz``: the database (a ``SELECT 1`` now) and NATS (the fleet connection)."""
        try:
            await self.units.run(lambda uow: uow.session.connection().exec_driver_sql("SELECT 1"))
        except ServiceUnavailableError:
            pass  # recorded on ``units.database``
        nc = self.nc
        if nc is None or not nc.is_connected:
            self.nats.failed("not connected")
        else:
            self.nats.ok()
        return {dep.name: _detail(dep) for dep in (self.units.database, self.nats)}

    async def _varz(self) -> dict[str, Any]:
        assert self.sys_nc is not None
        answer = await self.sys_nc.request(VARZ_REQUEST, b"", timeout=5.0)
        return dict(json.loads(answer.data))

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        await self.ingester.stop()
        if self.sys_nc is not None:
            try:
                await self.sys_nc.close()
            except Exception:
                log.debug("nats system connection close failed", exc_info=True)
        if self.nc is not None:
            try:
                await self.nc.drain()
            except Exception:  # the server may already be gone
                log.debug("nats drain failed", exc_info=True)
        if self.authorizer is not None:
            await self.authorizer.stop()
        if self.reloader is not None:
            await self.reloader.aclose()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
        self.engine.dispose()

    def agent_jwt(self, agent_id: str, public_key: str) -> str:
        assert self.authority is not None
        s = self.settings
        limits = UserLimits(
            subs=s.nats_agent_max_subscriptions,
            payload=s.nats_max_payload,
            ttl_seconds=s.nats_agent_jwt_ttl_seconds,
        )
        return self.authority.agent_jwt(agent_id=agent_id, public_key=public_key, limits=limits)

    async def apply_identities(self) -> None:
        """Return once NATS refuses every key the database has taken away."""
        assert self.authorizer is not None
        await self.authorizer.apply()

    async def send_commands(
        self, sends: list[tuple[str, str]], kind: CommandKind, args: dict[str, object]
    ) -> None:
        """Publish one command per (agent_id, command_id), then flush once."""
        assert self.nc is not None
        issued = utcnow()
        for agent_id, command_id in sends:
            command = Command(command_id=command_id, kind=kind, issued_at=issued, args=args)
            await self.nc.publish(subjects.commands(agent_id), command.model_dump_json().encode())
        await self.nc.flush()

    async def _sweep(self) -> None:
        """Expire dispatched rollout targets past their wave timeout, once the Console has been
        listening for ``result_grace_seconds`` (``fleet_policy.deliveries``)."""
        grace = self.settings.result_grace_seconds
        while True:
            await asyncio.sleep(self.settings.rollout_sweep_seconds)
            since = self.listening_since
            if since is None:
                continue
            try:
                await self.units.run(
                    functools.partial(_expire, since=since, grace=grace), write=True
                )
            except ServiceUnavailableError:
                pass  # logged once per outage by ``units.database``
            except Exception:
                log.exception("rollout timeout sweep failed; retrying")

    async def send_command(self, agent_id: str, kind: CommandKind, args: dict[str, object]) -> str:
        """One command with a fresh id (rollouts derive theirs: see ``send_commands``)."""
        command_id = uuid.uuid4().hex
        await self.send_commands([(agent_id, command_id)], kind, args)
        return command_id


def _expire(uow: UnitOfWork, *, since: datetime, grace: float) -> list[str]:
    return expire_overdue(uow.session, listening_since=since, grace_seconds=grace)


def _detail(dep: Dependency) -> dict[str, Any]:
    since = dep.up_since
    return {
        "ok": dep.up,
        **({"since": since.isoformat()} if since else {}),
        **({"problem": dep.problem} if dep.problem else {}),
    }
