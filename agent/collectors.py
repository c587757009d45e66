"""Collectors: what an agent publishes on a schedule besides its heartbeat.

A :class:`Collector` has a name, an interval and one coroutine that returns what to publish now.
The runtime runs each one in :func:`collector_loop`: once right after every (re)connection, then
every interval, skipped while disconnected. A collector with its own schedule (a
:class:`SelfScheduled` one: the cluster collector, which must lead before it publishes) runs its
own ``run(session)`` instead. A collector may also add fields to every heartbeat
(:class:`HeartbeatContributor`: the collector's ``leader`` flag, say).

This module holds the protocol only, and imports no collector: which collectors an agent runs
is decided in :mod:`agent.collector_factory`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agent.heartbeat import Ticker, run_periodically
from agent.session import NatsSession
from agent.settings import AgentSettings
from contracts.vocabulary import AgentType

__all__ = [
    "Collector",
    "HeartbeatContributor",
    "Publication",
    "SelfScheduled",
    "collector_loop",
    "heartbeat_fields",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Publication:
    """One message; ``subject`` must be under the agent's own prefix (the session checks)."""

    subject: str
    payload: bytes


class Collector(Protocol):
    name: str
    interval: float

    async def collect(self) -> Sequence[Publication]:
        """What to publish now; an exception is logged and the next tick tries again."""
        ...


@runtime_checkable
class SelfScheduled(Protocol):
    """A collector that keeps its own schedule: :func:`collector_loop` just runs this."""

    async def run(self, session: NatsSession) -> None: ...


@runtime_checkable
class HeartbeatContributor(Protocol):
    def heartbeat_fields(self) -> Mapping[str, Any]:
        """Fields of :class:`contracts.messages.Heartbeat` to set in the next heartbeat."""
        ...


def heartbeat_fields(
    settings: AgentSettings, collectors: Sequence[Collector]
) -> Callable[[], dict[str, Any]]:
    """What every heartbeat adds to the runtime's own fields: the cluster slug of a Kubernetes
    agent, and whatever its collectors report (the collector's leadership)."""
    static: dict[str, Any] = {}
    if settings.agent_type is not AgentType.HOST and settings.cluster_slug:
        static["cluster_slug"] = settings.cluster_slug
    contributors = [c for c in collectors if isinstance(c, HeartbeatContributor)]

    def fields() -> dict[str, Any]:
        merged = dict(static)
        for contributor in contributors:
            merged.update(contributor.heartbeat_fields())
        return merged

    return fields


async def collector_loop(session: NatsSession, collector: Collector) -> None:
    if isinstance(collector, SelfScheduled):
        await collector.run(session)
        return

    async def send() -> bool:
        if not session.readiness.nats_connected:
            return False
        sent = True
        for item in await collector.collect():
            sent = await session.publish(item.subject, item.payload) and sent
        return sent

    await run_periodically(session, Ticker(collector.interval), send, collector.name)
