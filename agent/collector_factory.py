"""Which collectors an agent runs, decided from its settings and identity.

:func:`default_collectors` gives host metrics to ``host`` agents, host and kubelet metrics to
``k8s-node-monitor`` (:mod:`agent.node`), and the inventory to ``k8s-cluster-collector``
(:mod:`agent.cluster`, imported only for that type: it is the one place that loads the
kubernetes client, and this function is the one way in).
"""

from __future__ import annotations

from collections.abc import Callable

from agent.collectors import Collector
from agent.settings import AgentSettings
from agent.state import AgentState
from contracts.vocabulary import AgentType

__all__ = ["CollectorFactory", "default_collectors"]

CollectorFactory = Callable[[AgentSettings, AgentState], list[Collector]]


def default_collectors(settings: AgentSettings, state: AgentState) -> list[Collector]:
    if state.agent_type is AgentType.K8S_CLUSTER_COLLECTOR:
        from agent.cluster import cluster_collectors

        return cluster_collectors(settings, state)
    if state.agent_type is AgentType.K8S_NODE_MONITOR:
        from agent.node import node_collectors

        return node_collectors(settings, state)
    collectors: list[Collector] = []
    if settings.host_metrics and state.agent_type is AgentType.HOST:
        from agent.host_metrics import HostMetricsCollector

        collectors.append(
            HostMetricsCollector(
                state.agent_id,
                settings.host_root,
                settings.host_proc,
                interval=settings.metrics_interval,
            )
        )
    return collectors
