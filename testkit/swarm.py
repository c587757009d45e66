"""Simulated agents: real enrolled identities, each on its own NATS connection with its own key,
answering commands. For rollout tests of the Console and the flow, and for benchmarks.

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
        self.heartbeats_sent = 0
        self.agents: list[SimAgent] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._conns: list[Any] = []
        self._conn_of: dict[str, Any] = {}  # agent id -> its connection
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> Swarm:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=300)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        token = self.console.install_token()
        idents = [Identity(name=f"{self.prefix}-{i:05d}") for i in range(self.count)]
        sem = asyncio.Semaphore(8)
        async with httpx.AsyncClient(base_url=self.console.url, timeout=60) as client:

            async def enroll(ident: Identity) -> SimAgent:
                async with sem:
                    r = await client.post(
                        "/api/v1/agents/enroll", json=ident.enroll_body(token, version=self.version)
                    )
                    r.raise_for_status()
                    ident.jwt = r.json()["nats_jwt"]
                    return SimAgent(ident, r.json()["agent_id"], self.version)

            self.agents = list(await asyncio.gather(*(enroll(i) for i in idents)))
        for agent in self.agents:
            nc = await nats.connect(
                self.nats_servers,
                **agent.ident.nats_options(),
                inbox_prefix=subjects.agent_inbox_prefix(agent.agent_id),
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=_quiet,
            )
            self._conns.append(nc)
            self._conn_of[agent.agent_id] = nc
            await nc.subscribe(subjects.commands(agent.agent_id), cb=self._handler(nc, agent))
            self._tasks.append(asyncio.create_task(self._beat(nc, agent)))
        for nc in self._conns:
            await nc.flush()

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

    def deliveries(self) -> list[Delivery]:
        return [d for a in self.agents for d in list(a.deliveries.values())]

    def received_by(self) -> dict[str, int]:
        """Commands received per agent, repeats (the Console's resends) included."""
        return {a.ident.name: len(a.received) for a in self.agents}

    def runs(self) -> dict[str, int]:
        """Executions per command id (a resent command is received again, never run again)."""
        return {c: n for a in self.agents for c, n in list(a.runs.items())}
