"""Simulated agents: real enrolled identities, each on its own NATS connection with its own key,
answering commands. For rollout tests of the Console and the flow, and for benchmarks.

At fleet scale (``per_connection`` > 1) agents share connections: the swarm's agents are cut
into shards of ``per_connection``, and each shard holds **one** NATS session, signed in as a
shard user (a user JWT of the agents' environment account, as the Console signs one, allowed
``proxima.agent.>`` / ``proxima.cmd.>`` / ``proxima.inbox.>``). Every agent of a shard still
has its own command subscription, publishes its heartbeats and result requests under its own
subject, and is a real enrolled record. What a shared session does not exercise: each agent's
own nkey sign-in and JWT (20,000 authentications, 20,000 TCP connections on the server, the
connection guard per identity) and the per-agent subject permissions (the shard user may
publish for any agent). Results are answered in the shard's inbox, not the agent's own.

Results follow the agent's protocol (``agent.delivery``): a request on the result subject,
answered in the agent's own inbox (``subjects.agent_inbox_prefix``); an unsettled answer (no
responder, a timeout, ``unavailable``) is retried with backoff until the Console acknowledges
it. The outbox is in memory: the swarm outlives a Console restart, it never restarts itself."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import nats

from contracts import subjects
from testkit.console import ConsoleProcess, Identity

# (agent name, command) → (status, error, new_version)
Behaviour = Callable[[str, dict[str, Any]], tuple[str, str | None, str | None]]


async def _quiet(_error: Exception) -> None:
    """Connection errors while a Console restarts are expected; nats-py would print each."""


def succeed(_name: str, cmd: dict[str, Any]) -> tuple[str, str | None, str | None]:
    return "succeeded", None, cmd["args"]["version"]


@dataclass
class Delivery:
    """One result's way to the Console: when it was first sent, how often, how it ended."""

    command_id: str
    first_sent: float  # time.time()
    attempts: int = 0
    acked: float | None = None
    outcome: str | None = None
    last_error: str | None = None  # why the last unsettled attempt was (an exception's type)


@dataclass
class SimAgent:
    ident: Identity
    agent_id: str
    version: str
    received: list[dict[str, Any]] = field(default_factory=list)
    executed: set[str] = field(default_factory=set)
    runs: dict[str, int] = field(default_factory=dict)  # command id -> times it was executed
    deliveries: dict[str, Delivery] = field(default_factory=dict)


class Swarm:
    """Runs its own event loop in a thread so synchronous tests can drive it."""

    def __init__(
        self,
        console: ConsoleProcess,
        count: int,
        *,
        prefix: str = "sim",
        version: str = "0.8.0",
        behaviour: Behaviour = succeed,
        heartbeat_seconds: float = 0.5,
        ack_timeout: float = 2.0,
        retry_max: float = 2.0,
        result_delay: float = 0.0,
        nats_servers: list[str] | None = None,
        per_connection: int = 1,
        enroll_concurrency: int = 8,
        preloaded: bool = False,
    ) -> None:
        self.console = console
        # Where the agents connect (default: the Console's embedded server); a cluster's nodes
        # are tried in random order, so the agents spread over them.
        self.nats_servers = nats_servers or [console.nats_url]
        self.count = count
        self.prefix = prefix
        self.version = version
        self.behaviour = behaviour
        self.heartbeat_seconds = heartbeat_seconds
        self.ack_timeout = ack_timeout
        self.retry_max = retry_max
        # Each result is sent after a random pause of up to this many seconds (an update takes
        # time): a fault test's results keep coming while the Console is down.
        self.result_delay = result_delay
        self.per_connection = max(1, per_connection)
        self.enroll_concurrency = enroll_concurrency
        # Records written straight into the Console's database instead of enrolled over HTTP
        # (a shard's session needs no agent JWT): for the rollout benchmark at 20,000, where
        # enrolling is not what is measured and would take most of the run.
        self.preloaded = preloaded
        if preloaded and self.per_connection == 1:
            raise ValueError("preloaded agents have no NATS credentials: use per_connection > 1")
        self.heartbeats_sent = 0
        self.agents: list[SimAgent] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._conns: list[Any] = []
        self._conn_of: dict[str, Any] = {}  # agent id -> its connection
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> Swarm:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(
            timeout=300 + 0.1 * self.count
        )
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        idents = [Identity(name=f"{self.prefix}-{i:05d}") for i in range(self.count)]
        if self.preloaded:
            ids = await asyncio.to_thread(self._preload_records, idents)
            self.agents = [SimAgent(i, a, self.version) for i, a in zip(idents, ids, strict=True)]
        else:
            await self._enroll(idents)
        await self._connect_all()

    async def _enroll(self, idents: list[Identity]) -> None:
        token = self.console.install_token()
        sem = asyncio.Semaphore(self.enroll_concurrency)
        async with httpx.AsyncClient(base_url=self.console.url, timeout=60) as client:

            async def enroll(ident: Identity) -> SimAgent:
                async with sem:
                    while True:  # a rate limit's 429 is waited out, as an agent would
                        r = await client.post(
                            "/api/v1/agents/enroll",
                            json=ident.enroll_body(token, version=self.version),
                        )
                        if r.status_code != 429:
                            break
                        await asyncio.sleep(float(r.headers.get("retry-after") or 1))
                    r.raise_for_status()
                    ident.jwt = r.json()["nats_jwt"]
                    return SimAgent(ident, r.json()["agent_id"], self.version)

            self.agents = list(await asyncio.gather(*(enroll(i) for i in idents)))

    def _preload_records(self, idents: list[Identity]) -> list[str]:
        """Agent records as an enrollment leaves them, inserted in batches (bench/fleet_list's
        way); seen now, so they are online for the Console's staleness window."""
        from sqlalchemy import insert

        from console.core.db import make_engine
        from console.models import Agent, new_id

        info = self.console.bootstrap_info
        now = datetime.now(UTC)
        ids = [new_id() for _ in idents]
        engine = make_engine(self.console.database_url())
        try:
            with engine.begin() as conn:
                for start in range(0, len(idents), 5000):
                    rows = [
                        {
                            "id": ids[i],
                            "client_id": info["client_id"],
                            "environment_id": info["environment_id"],
                            "agent_type": "host",
                            "name": idents[i].name,
                            "nats_public_key": idents[i].public_key,
                            "version": self.version,
                            "instance_id": idents[i].instance_id,
                            "can_self_update": True,
                            "labels": {},
                            "enrolled_at": now,
                            "last_seen_at": now,
                            "conflict_count": 0,
                        }
                        for i in range(start, min(len(idents), start + 5000))
                    ]
                    conn.execute(insert(Agent), rows)
        finally:
            engine.dispose()
        return ids

    async def _connect_all(self) -> None:
        if self.per_connection == 1:
            for agent in self.agents:
                nc = await self._connect(
                    agent.ident.nats_options(), subjects.agent_inbox_prefix(agent.agent_id)
                )
                await self._attach(nc, agent)
        else:
            for first in range(0, len(self.agents), self.per_connection):
                nc = await self._connect(
                    await asyncio.to_thread(self._shard_options, first),
                    f"{subjects.INBOX_ROOT}.shard-{self.prefix}-{first}",
                )
                for agent in self.agents[first : first + self.per_connection]:
                    await self._attach(nc, agent)
        for nc in self._conns:
            await nc.flush()

    def _shard_options(self, first: int) -> dict[str, Any]:
        """One shard's sign-in: its own key, a JWT of the agents' account (see the module)."""
        shard = Identity(name=f"{self.prefix}-shard-{first}")
        shard.jwt = self.console.nats_user_jwt(
            shard.public_key,
            pub=[f"{subjects.AGENT_ROOT}.>"],
            sub=[f"{subjects.COMMAND_ROOT}.>", f"{subjects.INBOX_ROOT}.>"],
            name=shard.name,
        )
        return shard.nats_options()

    async def _connect(self, options: dict[str, Any], inbox_prefix: str) -> Any:
        nc = await nats.connect(
            self.nats_servers,
            **options,
            inbox_prefix=inbox_prefix,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=_quiet,
        )
        self._conns.append(nc)
        return nc

    async def _attach(self, nc: Any, agent: SimAgent) -> None:
        self._conn_of[agent.agent_id] = nc
        await nc.subscribe(subjects.commands(agent.agent_id), cb=self._handler(nc, agent))
        self._tasks.append(asyncio.create_task(self._beat(nc, agent)))

    def _handler(self, nc: Any, agent: SimAgent) -> Callable[[Any], Any]:
        async def on_command(msg: Any) -> None:
            cmd = json.loads(msg.data)
            agent.received.append(cmd)
            if cmd["command_id"] in agent.executed:
                return  # the agent's ledger: a command id seen again is never run again
            agent.executed.add(cmd["command_id"])
            agent.runs[cmd["command_id"]] = agent.runs.get(cmd["command_id"], 0) + 1
            status, error, new_version = self.behaviour(agent.ident.name, cmd)
            if new_version and status == "succeeded":
                agent.version = new_version
            result = {
                "command_id": cmd["command_id"],
                "agent_id": agent.agent_id,
                "kind": cmd["kind"],
                "status": status,
                "finished_at": datetime.now(UTC).isoformat(),
                "error": error,
                "detail": {"old_version": self.version, "new_version": new_version},
            }
            if status != "silent":
                self._tasks.append(
                    asyncio.create_task(self._deliver(nc, agent, cmd["command_id"], result))
                )

        return on_command

    async def _deliver(self, nc: Any, agent: SimAgent, command_id: str, result: Any) -> None:
        """Request until the Console settles it (``recorded``, ``duplicate``, ``refused``…)."""
        if self.result_delay:
            await asyncio.sleep(random.uniform(0, self.result_delay))
        record = agent.deliveries[command_id] = Delivery(command_id, time.time())
        payload = json.dumps(result).encode()
        wait = 0.2
        while True:
            record.attempts += 1
            try:
                reply = await nc.request(
                    subjects.command_result(agent.agent_id), payload, timeout=self.ack_timeout
                )
                outcome = json.loads(reply.data).get("outcome")
            except Exception as e:  # no responders, timeout, reconnecting: keep it, try again
                outcome, record.last_error = None, type(e).__name__
            if outcome is not None and outcome != "unavailable":
                record.acked, record.outcome = time.time(), outcome
                return
            await asyncio.sleep(wait * (0.8 + 0.4 * random.random()))
            wait = min(self.retry_max, wait * 2)

    async def _beat(self, nc: Any, agent: SimAgent) -> None:
        if (
            self.preloaded
        ):  # seen at preloading: spread the fleet's beats over the interval, as a fleet
            await asyncio.sleep(random.uniform(0, self.heartbeat_seconds))
        while True:
            body = {
                "agent_id": agent.agent_id,
                "instance_id": agent.ident.instance_id,
                "agent_type": "host",
                "version": agent.version,
                "sent_at": datetime.now(UTC).isoformat(),
                "uptime_seconds": 1.0,
                "heartbeat_interval_seconds": self.heartbeat_seconds,
            }
            try:
                await nc.publish(subjects.heartbeat(agent.agent_id), json.dumps(body).encode())
            except Exception:  # reconnecting; the next beat goes out
                pass
            else:
                # Queued while reconnecting counts too: nats-py sends its buffer on reconnect.
                self.heartbeats_sent += 1
            await asyncio.sleep(self.heartbeat_seconds)

    async def _stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for nc in self._conns:
            try:
                await nc.close()
            except Exception:
                pass

    def connected(self, agent_id: str) -> bool:
        """Whether this agent's connection is up now (it reconnects forever otherwise)."""
        return bool(self._conn_of[agent_id].is_connected)

    @property
    def sessions(self) -> list[Any]:
        """The swarm's NATS connections (one per agent, or one per shard)."""
        return list(self._conns)

    def deliveries(self) -> list[Delivery]:
        return [d for a in self.agents for d in list(a.deliveries.values())]

    def received_by(self) -> dict[str, int]:
        """Commands received per agent, repeats (the Console's resends) included."""
        return {a.ident.name: len(a.received) for a in self.agents}

    def runs(self) -> dict[str, int]:
        """Executions per command id (a resent command is received again, never run again)."""
        return {c: n for a in self.agents for c, n in list(a.runs.items())}
