"""The node agent's metrics: the host's (through /host/proc) and the kubelet's, one message.

Both go out as one :class:`contracts.messages.HostMetrics` on ``proxima.agent.<id>.metrics``,
the kubelet's summary under ``extra["kubelet"]`` (or ``extra["kubelet_error"]`` while it
fails): the Console keeps the latest metrics message per agent, so two messages per interval
would overwrite each other.

A failing kubelet is logged once per distinct failure, with the fix, and its recovery once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from agent.collectors import Publication
from agent.host_metrics import HostMetricsCollector
from agent.node.kubelet import KubeletClient, KubeletError, summarize
from agent.problems import ProblemLog
from contracts import subjects
from contracts.messages import HostMetrics

__all__ = ["NodeMetricsCollector"]

log = logging.getLogger(__name__)


class NodeMetricsCollector:
    """A :class:`agent.collectors.Collector`: host metrics plus the kubelet's summary."""

    name = "node metrics"

    def __init__(
        self, host: HostMetricsCollector, kubelet: KubeletClient | None, *, interval: float
    ) -> None:
        self.host = host
        self.kubelet = kubelet
        self.interval = interval
        self.agent_id = host.agent_id
        self.kubelet_problems = ProblemLog(log)
        self._kubelet_seen = False

    async def collect(self) -> Sequence[Publication]:
        sample = await asyncio.to_thread(self.sample)
        return [Publication(subjects.metrics(self.agent_id), sample.model_dump_json().encode())]

    def sample(self) -> HostMetrics:
        metrics = self.host.sample()
        if self.kubelet is not None:
            try:
                metrics.extra["kubelet"] = summarize(self.kubelet.summary())
            except KubeletError as e:
                metrics.extra["kubelet_error"] = str(e)
                self.kubelet_problems.failed(e.key, "kubelet metrics not flowing: %s: %s", e, e.fix)
            else:
                url = self.kubelet.url
                if (
                    not self.kubelet_problems.recovered(
                        "kubelet metrics flowing again from %s", url
                    )
                    and not self._kubelet_seen
                ):
                    log.info("kubelet metrics from %s", url)
                self._kubelet_seen = True
        return metrics
