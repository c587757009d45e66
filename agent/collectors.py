"""Collectors: what an agent publishes on a schedule besides its heartbeat.

A :class:`Collector` has a name, an interval and one coroutine that returns what to publish now.
The runtime runs each one in :func:`collector_loop`: once right after every (re)connection, then
every interval, skipped while disconnected. Which collectors an agent runs is decided by a
:data:`CollectorFactory` from its settings and identity; :func:`default_collectors` gives host
metrics to ``host`` and ``k8s-node-monitor`` agents. The Kubernetes collectors (kubelet metrics,
cluster inventory) plug in here by agent type, without touching the runtime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from agent.heartbeat import Ticker, run_periodically
from agent.session import NatsSession
from agent.settings import AgentSettings
from agent.state import AgentState
from contracts.agent_types import AgentType

__all__ = [
    "Collector",
    "CollectorFactory",
    "Publication",
    "collector_loop",
    "default_collectors",
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


CollectorFactory = Callable[[AgentSettings, AgentState], list[Collector]]


def default_collectors(settings: AgentSettings, state: AgentState) -> list[Collector]:
    collectors: list[Collector] = []
    if settings.host_metrics and state.agent_type in (AgentType.HOST, AgentType.K8S_NODE_MONITOR):
        from agent.host import HostMetricsCollector

        collectors.append(
            HostMetricsCollector(
                state.agent_id,
                settings.host_root,
                settings.host_proc,
                interval=settings.metrics_interval,
            )
        )
    return collectors


async def collector_loop(session: NatsSession, collector: Collector) -> None:
    async def send() -> bool:
        if not session.readiness.nats_connected:
            return False
        sent = True
        for item in await collector.collect():
            sent = await session.publish(item.subject, item.payload) and sent
        return sent

    await run_periodically(session, Ticker(collector.interval), send, collector.name)
