"""The agent's runtime run in-process: settings for tests, ``running``, commands over NATS."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.runtime import AgentRuntime
from agent.settings import AgentSettings
from agent.state import AgentState
from contracts import subjects
from testkit.agent_state import make_state, write_state
from testkit.nats import NatsServer


class Inbox:
    """Everything published on a subject, decoded. A request (a command result) is answered
    like the Console answers it: ``recorded`` (or ``ack`` when set, ``None``: no answer)."""

    def __init__(self, ack: str | None = "recorded") -> None:
        self.messages: list[dict[str, Any]] = []
        self.ack = ack

    async def handle(self, msg: Any) -> None:
        body = json.loads(msg.data)
        self.messages.append(body)
        if msg.reply and self.ack is not None:
            answer = {"command_id": body.get("command_id", "-"), "outcome": self.ack}
            await msg.respond(json.dumps(answer).encode())


def settings(data_dir: Path, **overrides: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "health_port": 0,
        "heartbeat_interval": 0.2,
        "metrics_interval": 0.3,
        "nats_reconnect_wait": 0.05,
        "nats_reconnect_max_wait": 0.2,
        "labels": {"zone": "a"},
    }
    values.update(overrides)
    return AgentSettings(**values)


@asynccontextmanager
async def running(runtime: AgentRuntime) -> AsyncIterator[AgentRuntime]:
    task = asyncio.create_task(runtime.run(install_signal_handlers=False))
    try:
        yield runtime
    finally:
        runtime.stop()
        await asyncio.wait_for(task, 15)


def enrolled(nats: NatsServer, data_dir: Path, **kw: Any) -> AgentState:
    state = make_state(nats_url=nats.url, **kw)
    write_state(data_dir, state)
    return state


async def send_command(client: Any, agent_id: str, kind: str, command_id: str, **args: Any) -> None:
    body = {
        "command_id": command_id,
        "kind": kind,
        "issued_at": datetime.now(UTC).isoformat(),
        "args": args,
    }
    await client.publish(subjects.commands(agent_id), json.dumps(body).encode())
    await client.flush()


def ready(runtime: AgentRuntime) -> bool:
    return runtime.readiness.connection_reason() is None
