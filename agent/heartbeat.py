"""The heartbeat, and the periodic loop every publisher runs in (see :mod:`agent.collectors`).

Each sends once right after every (re)connection, then every interval. While disconnected they
skip: a heartbeat is a statement about *now*, so queueing old ones would only mislead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.session import NatsSession
from contracts import subjects
from contracts.messages import Heartbeat
from contracts.vocabulary import AgentType
from contracts.vocabulary.commands import CommandFailureKind

__all__ = ["HeartbeatInfo", "Ticker", "heartbeat_loop", "run_periodically"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeartbeatInfo:
    """What a heartbeat says about this process besides the time."""

    instance_id: str
    agent_type: AgentType
    version: str
    heartbeat_interval: float
    metrics_interval: float | None
    can_self_update: bool
    labels: dict[str, str] = field(default_factory=dict)
    self_update_blocker: CommandFailureKind | None = None  # why not, when it cannot
    started: float = field(default_factory=time.monotonic)
    # Asked at every heartbeat: fields that change (the collector's ``leader``) or that only
    # some agent types have (``cluster_slug``, ``sync_interval_seconds``). They win over the
    # fields above (a cluster collector reports no metrics interval).
    fields: Callable[[], Mapping[str, Any]] | None = None


class Ticker:
    """Fires every ``interval`` and immediately when kicked (on each connection)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._kick = asyncio.Event()

    def kick(self) -> None:
        self._kick.set()

    async def wait(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.interval):
                await self._kick.wait()
        self._kick.clear()


async def run_periodically(
    session: NatsSession,
    ticker: Ticker,
    send: Callable[[], Awaitable[bool]],
    what: str,
    beat: Callable[[], None] | None = None,
) -> None:
    """``send`` every tick; ``beat`` (a liveness watch) every round, connected or not."""
    session.on_connected(ticker.kick)
    while True:
        await ticker.wait()
        if beat is not None:
            beat()
        try:
            sent = await send()
        except Exception:
            log.exception("%s failed", what)
            continue
        if not sent:
            log.debug("%s skipped: nats not connected", what)


def build_heartbeat(agent_id: str, info: HeartbeatInfo) -> Heartbeat:
    values: dict[str, Any] = {
        "agent_id": agent_id,
        "instance_id": info.instance_id,
        "agent_type": info.agent_type,
        "version": info.version,
        "sent_at": datetime.now(UTC),
        "uptime_seconds": round(time.monotonic() - info.started, 3),
        "heartbeat_interval_seconds": info.heartbeat_interval,
        "metrics_interval_seconds": info.metrics_interval,
        "can_self_update": info.can_self_update,
        "self_update_blocker": info.self_update_blocker,
        "labels": info.labels,
    }
    if info.fields is not None:
        values.update(info.fields())
    return Heartbeat(**values)


async def heartbeat_loop(
    session: NatsSession, info: HeartbeatInfo, beat: Callable[[], None] | None = None
) -> None:
    async def send() -> bool:
        agent_id = session.agent_id
        beat = build_heartbeat(agent_id, info)
        return await session.publish(subjects.heartbeat(agent_id), beat.model_dump_json().encode())

    await run_periodically(session, Ticker(info.heartbeat_interval), send, "heartbeat", beat)
