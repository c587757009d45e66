"""The node agent (``k8s-node-monitor``, the chart's DaemonSet): host and kubelet metrics.

It stays light: no kubernetes client (the kubelet is plain HTTPS), no server frameworks. The
runtime reaches it through :func:`agent.collectors.default_collectors`. See
``docs/kubernetes-agents.md``.
"""

from __future__ import annotations

import logging

from agent.collectors import Collector
from agent.host_metrics import HostMetricsCollector
from agent.node.kubelet import KubeletClient, KubeletConfig, KubeletError, KubeletProblem
from agent.node.metrics import NodeMetricsCollector
from agent.settings import AgentSettings
from agent.state import AgentState

__all__ = [
    "KubeletClient",
    "KubeletConfig",
    "KubeletError",
    "KubeletProblem",
    "NodeMetricsCollector",
    "kubelet_config",
    "node_collectors",
]

log = logging.getLogger(__name__)


def kubelet_config(settings: AgentSettings) -> KubeletConfig | None:
    """Where and how to read the kubelet; ``None`` without ``PROXIMA_KUBELET_URL``."""
    if not settings.kubelet_url:
        return None
    account = settings.service_account_dir
    return KubeletConfig(
        url=settings.kubelet_url,
        token_file=settings.kubelet_token_file or account / "token",
        ca_file=settings.kubelet_ca_file or account / "ca.crt",
        insecure_skip_verify=settings.kubelet_insecure_skip_verify,
    )


def node_collectors(settings: AgentSettings, state: AgentState) -> list[Collector]:
    """Host and kubelet metrics every ``metricsInterval``, when ``hostMetrics`` is on (the chart
    mounts the host's /proc and /sys only then, and its docs tie kubelet metrics to it)."""
    if not settings.host_metrics:
        log.info("host and kubelet metrics off (hostMetrics: false)")
        return []
    host = HostMetricsCollector(
        state.agent_id, settings.host_root, settings.host_proc, interval=settings.metrics_interval
    )
    config = kubelet_config(settings)
    if config is None:
        log.info("kubelet metrics off: PROXIMA_KUBELET_URL is not set")
    elif config.insecure_skip_verify:
        log.warning(
            "kubelet serving certificate not verified (PROXIMA_KUBELET_INSECURE_SKIP_VERIFY)"
        )
    kubelet = KubeletClient(config) if config is not None else None
    return [NodeMetricsCollector(host, kubelet, interval=settings.metrics_interval)]
