"""The Console's services in-process: a real ``ServiceRuntime`` on in-memory SQLite, a clock
the test moves, and a recorder of the effects a unit of work runs after commit.

The layer under the subprocess tests (``tests/console``): a rule of ``console/services`` is
tested in milliseconds, by calling the service a route would call. What it stands in for is
named in :class:`InProcessConsole`'s docstring.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sqlite3
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import nkeys
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

import console.core.clock
from console.auth import Principal
from console.bootstrap import bootstrap
from console.core.db import migrate
from console.core.settings import ConsoleSettings
from console.models import Agent
from console.prefect_api import ResumeAnswer, RunOrigin, RunState
from console.schemas import InstallTokenCreate
from console.services import tokens
from console.services.heartbeats import record_heartbeats
from console.services.identities import enroll_agent
from console.services.rollouts.results import RecordedResults, record_results
from console.services.unit_of_work import UnitOfWork, UnitsOfWork
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    IdentitySignals,
    enrollment_message_of,
)
from contracts.messages import CommandKind, CommandResult, CommandStatus, Heartbeat
from contracts.vocabulary import AgentType, Scope
from testkit.console import b64

__all__ = [
    "AgentKey",
    "CommandSent",
    "EffectRecorder",
    "FakeClock",
    "FlowResumed",
    "FlowStarted",
    "IdentitiesApplied",
    "InProcessConsole",
    "InProcessRuntime",
    "in_process_console",
    "migrated_template",
    "replace_everywhere",
]

T = TypeVar("T")

# Far from the wall clock on purpose: a rule that reads the real time instead of the Console's
# clock (``console.core.clock.utcnow``) is seen at once.
EPOCH = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
PREFECT_API_URL = "http://prefect.invalid/api"


class FakeClock:
    """The Console's clock, moved by the test: quiet windows and timeouts pass without sleeps."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now

    def frozen_datetime(self) -> type[datetime]:
        """A ``datetime`` whose ``now()`` is this clock (what ``utcnow`` reads)."""
        clock = self

        class ClockDatetime(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
                return clock.now if tz is None else clock.now.astimezone(tz)

        return ClockDatetime


# -- effects ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdentitiesApplied:
    """``apply_identities``: NATS told to refuse every key the database took away."""


@dataclass(frozen=True)
class CommandSent:
    agent_id: str
    command_id: str
    kind: CommandKind
    args: dict[str, object] = field(hash=False, compare=True)


@dataclass(frozen=True)
class FlowStarted:
    deployment: str
    parameters: dict[str, Any] = field(hash=False)
    flow_run_id: UUID | None = None


@dataclass(frozen=True)
class FlowResumed:
    flow_run_id: UUID
    run_input: dict[str, Any] = field(hash=False)


Effect = IdentitiesApplied | CommandSent | FlowStarted | FlowResumed


class EffectRecorder:
    """Everything the services did outside the database, in the order they did it."""

    def __init__(self) -> None:
        self.effects: list[Effect] = []
        self.timeline: list[Effect | str] = []
        """The effects interleaved with ``"commit"``: each time the database committed."""

    def record(self, effect: Effect) -> None:
        self.effects.append(effect)
        self.timeline.append(effect)

    def of(self, kind: type[T]) -> list[T]:
        return [e for e in self.effects if isinstance(e, kind)]

    @property
    def commands(self) -> list[CommandSent]:
        return self.of(CommandSent)

    def clear(self) -> None:
        self.effects.clear()
        self.timeline.clear()


class RecordingPrefectApi:
    """Stands in for ``console.prefect_api.PrefectApi``: records instead of calling Prefect."""

    recorder: EffectRecorder

    def __init__(self, api_url: str, *, timeout: float = 10.0) -> None:
        self.api_url = api_url

    async def start_deployment(self, name: str, parameters: dict[str, Any]) -> UUID:
        """The n-th run started is ``UUID(int=n)``."""
        flow_run_id = UUID(int=len(self.recorder.of(FlowStarted)) + 1)
        self.recorder.record(FlowStarted(name, dict(parameters), flow_run_id))
        return flow_run_id

    async def resume(self, flow_run_id: UUID, run_input: dict[str, Any]) -> ResumeAnswer:
        self.recorder.record(FlowResumed(flow_run_id, dict(run_input)))
        return ResumeAnswer(True, "accepted")

    async def flow_run_state(self, flow_run_id: UUID) -> RunState | None:
        """Every recorded run is paused (the state the Console's resume expects)."""
        return RunState("PAUSED", "Paused", "")

    async def flow_run_origin(self, flow_run_id: UUID) -> RunOrigin | None:
        """A run this double started: its deployment's flow and ``rollout_id``; else None."""
        for started in self.recorder.of(FlowStarted):
            if started.flow_run_id == flow_run_id:
                flow = started.deployment.partition("/")[0]
                return RunOrigin(flow, started.parameters.get("rollout_id"))
        return None


# -- the runtime -----------------------------------------------------------------------------------


class InProcessRuntime:
    """A ``ServiceRuntime``: the real units of work (session, writer lock, thread hop, effects
    after commit) on the given engine; NATS and the JWT authority replaced by the recorder."""

    def __init__(self, settings: ConsoleSettings, engine: Engine, recorder: EffectRecorder):
        self.settings = settings
        self.units = UnitsOfWork(engine, serialize_writes=True)
        self.rotation_waiters: dict[str, Any] = {}
        self.recorder = recorder

    @property
    def agent_nats_url(self) -> str:
        return "nats://in-process.invalid:4222"

    async def agent_jwt(self, agent_id: str, public_key: str, environment_id: str) -> str:
        return f"jwt-of:{agent_id}:{public_key}"

    async def apply_identities(self) -> None:
        self.recorder.record(IdentitiesApplied())

    async def send_commands(
        self, sends: list[tuple[str, str]], kind: CommandKind, args: dict[str, object]
    ) -> None:
        for agent_id, command_id in sends:
            self.recorder.record(CommandSent(agent_id, command_id, kind, dict(args)))

    async def send_command(self, agent_id: str, kind: CommandKind, args: dict[str, object]) -> str:
        command_id = uuid.uuid4().hex
        await self.send_commands([(agent_id, command_id)], kind, args)
        return command_id


# -- the database ----------------------------------------------------------------------------------


def migrated_template(directory: Path) -> Path:
    """A SQLite file brought to head by the Console's own migrations (``console.db``);
    each test copies it into memory instead of migrating again."""
    path = directory / "template.db"
    migrate(f"sqlite:///{path}")
    return path


def memory_engine(template: Path) -> Engine:
    """``sqlite://`` on one shared connection (a ``StaticPool``), the template's schema in it."""
    engine = create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _foreign_keys(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA foreign_keys=ON")

    raw = engine.raw_connection()
    try:
        source = sqlite3.connect(template)
        try:
            source.backup(raw.driver_connection)  # type: ignore[arg-type]
        finally:
            source.close()
    finally:
        raw.close()
    return engine


# -- an agent's key --------------------------------------------------------------------------------


@dataclass
class AgentKey:
    """An agent's key pair and identity signals, enrolling at the Console's clock."""

    name: str
    agent_type: AgentType = AgentType.HOST
    machine_id: str | None = None
    product_uuid: str | None = None
    seed: bytes = field(
        default_factory=lambda: nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    )
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def public_key(self) -> str:
        return str(nkeys.from_seed(bytearray(self.seed)).public_key.decode())

    def new_key(self) -> AgentKey:
        """The same machine after its state was lost: same name and signals, a new key."""
        return AgentKey(self.name, self.agent_type, self.machine_id, self.product_uuid)

    def request(self, install_token: str, signed_at: datetime, **over: Any) -> EnrollRequest:
        """A signed request; ``over`` replaces fields before signing (``signature`` after)."""
        body: dict[str, Any] = {
            "install_token": install_token,
            "agent_type": self.agent_type,
            "name": self.name,
            "public_key": self.public_key,
            "signature": "x" * 86,
            "signed_at": signed_at,
            "signals": IdentitySignals(machine_id=self.machine_id, product_uuid=self.product_uuid),
            "version": "0.8.0",
            "instance_id": self.instance_id,
            **{k: v for k, v in over.items() if k != "signature"},
        }
        unsigned = EnrollRequest(**body)
        signature = over.get("signature") or b64(
            nkeys.from_seed(bytearray(self.seed)).sign(enrollment_message_of(unsigned))
        )
        return unsigned.model_copy(update={"signature": signature})


# -- the whole -------------------------------------------------------------------------------------


class InProcessConsole:
    """A Console's services on a real runtime in this process, for rule tests in milliseconds.

    What is real: every ``console.services`` function, the unit of work (one session and one
    transaction per call, the SQLite writer lock, the hop to a worker thread, effects run only
    after commit), the Console's Alembic schema, its settings class, its models and errors.

    What is NOT exercised — the subprocess tests (``tests/console``, ``tests/e2e``) cover it:

    - NATS: no server, no authorization file, no JWT (``agent_jwt`` is a placeholder); identity
      changes, commands and Prefect calls are recorded in ``effects``, not delivered;
    - HTTP: no FastAPI routes, request parsing, auth headers or response codes — services raise
      ``console.errors`` exceptions, which the routes map to statuses;
    - threads at once: one call runs at a time; the in-memory database is one shared connection
      (a ``StaticPool``), so no two transactions ever contend as they do in a real Console;
    - the heartbeat ingester's batching, the rollout sweeper's timer, PostgreSQL.

    Time is ``clock`` (it stands in for ``console.core.clock.utcnow`` everywhere); move it with
    ``clock.advance(seconds)``.
    """

    def __init__(
        self, rt: InProcessRuntime, clock: FakeClock, principal: Principal, client_name: str
    ) -> None:
        self.rt = rt
        self.clock = clock
        self.effects = rt.recorder
        self.principal = principal
        self.client_name = client_name

    @property
    def settings(self) -> ConsoleSettings:
        return self.rt.settings

    async def run(self, work: Callable[[UnitOfWork], T], *, write: bool = False) -> T:
        return await self.rt.units.run(work, write=write)

    async def install_token(self, **body: Any) -> str:
        created = await tokens.create_install_token(
            self.rt, self.principal, InstallTokenCreate(name=body.pop("name", "test"), **body)
        )
        return created.token

    async def enroll(
        self, key: AgentKey, install_token: str, **over: Any
    ) -> tuple[EnrollResponse, bool]:
        return await enroll_agent(self.rt, key.request(install_token, self.clock.now, **over))

    async def add_agents(self, count: int, prefix: str = "host", **fields: Any) -> dict[str, str]:
        """``count`` online host records written directly (what enrollment would leave, minus
        evidence and history: for tests of what comes after enrollment); name → id."""
        now = self.clock.now

        def work(uow: UnitOfWork) -> dict[str, str]:
            made = {}
            for i in range(count):
                agent = Agent(
                    client_id=self.principal.client_id,
                    environment_id=self.principal.environment_id,
                    agent_type=AgentType.HOST.value,
                    name=f"{prefix}-{i:03d}",
                    nats_public_key=AgentKey(f"{prefix}-{i:03d}").public_key,
                    version="0.8.0",
                    enrolled_at=now,
                    last_seen_at=now,
                    **fields,
                )
                uow.session.add(agent)
                made[agent.name] = agent.id
            return made

        return await self.run(work, write=True)

    async def heartbeat(self, agent_id: str, **over: Any) -> None:
        """One heartbeat batch holding this agent's heartbeat, recorded at the clock's time."""
        fields: dict[str, Any] = {
            "agent_id": agent_id,
            "instance_id": "instance-1",
            "agent_type": AgentType.HOST,
            "version": "0.8.0",
            "sent_at": self.clock.now,
            "uptime_seconds": 1.0,
            "heartbeat_interval_seconds": 10.0,
            **over,
        }
        heartbeat = Heartbeat(**fields)
        await self.run(
            lambda uow: record_heartbeats(uow.session, {agent_id: heartbeat}, {}, []), write=True
        )

    async def result(self, command: CommandSent, status: CommandStatus, **detail: Any) -> list[str]:
        """The agent's result for a sent command, through the ingester's service; returns the
        rollouts it halted."""
        return (await self.deliver(command, status, **detail)).halted

    async def deliver(
        self,
        command: CommandSent,
        status: CommandStatus,
        *,
        agent_id: str | None = None,
        **detail: Any,
    ) -> RecordedResults:
        """The same, returning what the batch did (its acknowledgement); ``agent_id`` sends it
        as another agent would."""
        sender = agent_id or command.agent_id
        result = CommandResult(
            command_id=command.command_id,
            agent_id=command.agent_id,
            kind=command.kind,
            status=status,
            finished_at=self.clock.now,
            error=None if status is CommandStatus.SUCCEEDED else "it broke",
            detail=detail,
        )
        return await self.run(
            lambda uow: record_results(uow.session, [(sender, result)]), write=True
        )


def load_product_modules() -> None:
    """Import every module of ``console.services`` (so ``replace_everywhere`` sees them all)."""
    import console.services

    for info in pkgutil.walk_packages(console.services.__path__, "console.services."):
        importlib.import_module(info.name)


def replace_everywhere(
    patch: Callable[[object, str, object], None],
    original: object,
    replacement: object,
    packages: tuple[str, ...] = ("console", "rollout_policy", "flows"),
) -> list[str]:
    """Swap ``original`` for ``replacement`` wherever a loaded module of ``packages`` holds it
    (its home and every ``from … import`` of it); returns where. ``patch`` is
    ``monkeypatch.setattr``. A rule replaced so is seen to be the one its callers decide with."""
    load_product_modules()
    where = []
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == p or name.startswith(p + ".") for p in packages):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                patch(module, attr, replacement)
                where.append(f"{name}.{attr}")
    return where


@contextmanager
def in_process_console(
    template: Path, patch: Callable[[object, str, object], None], **settings: Any
) -> Iterator[InProcessConsole]:
    """Build one; ``patch`` is ``monkeypatch.setattr`` (the clock and Prefect are swapped in
    the product modules, and restored by pytest)."""
    import console.services.rollouts.drivers as drivers
    import console.services.rollouts.lifecycle as lifecycle
    import console.services.rollouts.planning as planning

    clock = FakeClock()
    recorder = EffectRecorder()
    patch(console.core.clock, "datetime", clock.frozen_datetime())
    prefect = type("RecordingPrefectApi", (RecordingPrefectApi,), {"recorder": recorder})
    patch(planning, "PrefectApi", prefect)
    patch(lifecycle, "PrefectApi", prefect)
    patch(drivers, "PrefectApi", prefect)
    engine = memory_engine(template)
    event.listen(engine, "commit", lambda _conn: recorder.timeline.append("commit"))
    config: dict[str, Any] = {
        "data_dir": template.parent / "unused",
        "database_url": "sqlite://",
        "prefect_api_url": PREFECT_API_URL,
        # the reference artifacts of tests/services
        "artifact_url_allow": ["http://artifacts.invalid/"],
        **settings,
    }
    rt = InProcessRuntime(ConsoleSettings(**config), engine, recorder)
    try:
        with Session(engine) as session:
            made = bootstrap(session, client_name="acme", environment_name="prod")
        principal = Principal(
            token_id=made.token_id,
            name="admin",
            client_id=made.client_id,
            environment_id=made.environment_id,
            scopes=frozenset(Scope),
        )
        yield InProcessConsole(rt, clock, principal, made.client_name)
    finally:
        engine.dispose()
