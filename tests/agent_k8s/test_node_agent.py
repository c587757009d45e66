"""The node agent: host and kubelet metrics in one message; kubelet failures reported once, with
the chart's fix, and the recovery once; no kubernetes client ever loaded."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.host_metrics import HostMetricsCollector
from agent.node import KubeletClient, KubeletConfig, KubeletProblem, NodeMetricsCollector
from agent.node.kubelet import RBAC_FIX, KubeletError, summarize
from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess
from testkit.k8s import (
    FakeKubelet,
    NatsObserver,
    register_cluster,
    stats_summary,
)
from testkit.net import free_port
from testkit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kubelet(tmp_path: Path):
    fake = FakeKubelet(tmp_path / "kubelet").start()
    try:
        yield fake
    finally:
        fake.stop()


def _client(kubelet: FakeKubelet, **over) -> KubeletClient:
    config = {
        "url": kubelet.url,
        "token_file": kubelet.token_file,
        "ca_file": kubelet.ca_file,
        **over,
    }
    return KubeletClient(KubeletConfig(**config))


def _collector(tmp_path: Path, client: KubeletClient) -> NodeMetricsCollector:
    host = HostMetricsCollector("ag_node", Path("/"), None, interval=1.0)
    return NodeMetricsCollector(host, client, interval=1.0)


def test_the_summary_is_read_with_the_token_and_verified_against_the_cluster_ca(
    kubelet: FakeKubelet,
) -> None:
    summary = summarize(_client(kubelet).summary())
    assert summary["node_name"] == "node-1"
    assert (summary["pods"], summary["containers"]) == (20, 40)
    assert summary["cpu_usage_nanocores"] == 412_000_000
    assert summary["network_rx_bytes"] == 11_000
    assert summary["pod_usage"][0] == {
        "namespace": "shop",
        "name": "web-0",
        "cpu_nanocores": 1_000_000,
        "memory_working_set_bytes": 50_000_000,
    }


def test_per_pod_usage_is_bounded() -> None:
    summary = summarize(stats_summary("n", pods=300))
    assert summary["pods"] == 300 and len(summary["pod_usage"]) == 250
    assert summary["pod_usage_truncated"] is True


def test_an_untrusted_kubelet_certificate_names_the_insecure_opt_in_which_works(
    kubelet: FakeKubelet, tmp_path: Path
) -> None:
    with pytest.raises(KubeletError) as caught:
        _client(kubelet, ca_file=tmp_path / "no-such-ca.crt").summary()
    assert caught.value.problem is KubeletProblem.UNTRUSTED
    assert "nodeAgent.kubelet.insecureSkipVerify=true" in caught.value.fix
    insecure = _client(kubelet, ca_file=None, insecure_skip_verify=True)
    assert insecure.summary()["node"]["nodeName"] == "node-1"


def test_a_missing_token_says_the_pod_needs_its_service_account_token(
    kubelet: FakeKubelet, tmp_path: Path
) -> None:
    with pytest.raises(KubeletError) as caught:
        _client(kubelet, token_file=tmp_path / "absent").summary()
    assert caught.value.problem is KubeletProblem.NO_TOKEN
    assert "automountServiceAccountToken" in caught.value.fix


def test_kubelet_failures_are_logged_once_per_distinct_failure_with_the_fix_then_recovery_once(
    kubelet: FakeKubelet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.node.metrics")
    collector = _collector(tmp_path, _client(kubelet))
    assert collector.sample().extra["kubelet"]["node_name"] == "node-1"
    assert caplog.text.count("kubelet metrics from https://127.0.0.1") == 1

    kubelet.answer = 403
    samples = [collector.sample() for _ in range(4)]
    assert all("403 Forbidden" in s.extra["kubelet_error"] for s in samples)
    assert all("kubelet" not in s.extra for s in samples)
    kubelet.answer = 401
    for _ in range(3):
        collector.sample()
    lines = [r.getMessage() for r in caplog.records if "not flowing" in r.getMessage()]
    assert len(lines) == 2, lines
    assert '403 Forbidden (nodes "node-1" is forbidden' in lines[0]
    assert all(RBAC_FIX in line for line in lines)
    assert "401 Unauthorized" in lines[1]

    kubelet.answer = 200
    for _ in range(3):
        assert collector.sample().extra["kubelet"]["pods"] == 20
    assert caplog.text.count("kubelet metrics flowing again") == 1
    assert caplog.text.count("not flowing") == 2


def test_connection_refused_is_logged_once_with_the_kubelet_url_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    client = KubeletClient(
        KubeletConfig(url=f"https://127.0.0.1:{free_port()}", token_file=token, timeout=2)
    )
    collector = _collector(tmp_path, client)
    for _ in range(4):
        assert "connection refused" in collector.sample().extra["kubelet_error"]
    lines = [r.getMessage() for r in caplog.records if "not flowing" in r.getMessage()]
    assert len(lines) == 1
    assert "nodeAgent.kubelet.url / nodeAgent.kubelet.port" in lines[0]
    assert RBAC_FIX in lines[0]


def test_the_node_agent_never_loads_the_kubernetes_client(tmp_path: Path) -> None:
    """import-linter sees imports; this sees what a node agent process actually loads, through
    the runtime's collector factory (which imports agent.cluster for collectors only)."""
    script = f"""
import sys
from agent.cli import app
from agent.runtime import AgentRuntime
from agent.collector_factory import default_collectors
from agent.settings import AgentSettings
from testkit.agent_state import make_state
from contracts.vocabulary import AgentType
settings = AgentSettings(
    agent_type="k8s-node-monitor", kubelet_url="https://127.0.0.1:10250",
    data_dir={str(tmp_path)!r},
)
state = make_state(agent_type=AgentType.K8S_NODE_MONITOR)
names = [c.name for c in default_collectors(settings, state)]
heavy = ("kubernetes", "httpx", "prefect", "fastapi")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
print(names, loaded)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['node metrics'] []"


def test_a_node_agent_publishes_host_and_kubelet_metrics_and_reports_a_forbidden_kubelet_once(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kubelet: FakeKubelet,
    tmp_path: Path,
) -> None:
    slug, token = register_cluster(k8s_console, "Node Metrics")
    agent = AgentProcess(
        name="worker-1",
        data_dir=tmp_path / "node-agent",
        backend_url=k8s_console.url,
        install_token=token,
        agent_type="k8s-node-monitor",
        env={
            "PROXIMA_CLUSTER_NAME": "Node Metrics",
            "PROXIMA_CLUSTER_SLUG": slug,
            "PROXIMA_METRICS_INTERVAL": "0.3s",
            "PROXIMA_HOST_METRICS": "true",
            "PROXIMA_HOST_PROC": "/proc",
            "PROXIMA_HOST_SYS": "/sys",
            "PROXIMA_KUBELET_URL": kubelet.url,
            "PROXIMA_KUBELET_INSECURE_SKIP_VERIFY": "false",
            "PROXIMA_KUBELET_CA_FILE": str(kubelet.ca_file),
            "PROXIMA_KUBELET_TOKEN_FILE": str(kubelet.token_file),
        },
    ).start()
    try:
        agent_id = agent.agent_id()
        metrics = wait_for(
            lambda: (
                (m := k8s_console.agent(agent_id)["last_metrics"]) and "kubelet" in m["extra"] and m
            ),
            timeout=30,
            what="kubelet metrics in the Console",
        )
        assert metrics["extra"]["kubelet"]["node_name"] == "node-1"
        assert metrics["memory_total_bytes"] > 0
        beat = wait_for(lambda: observer.of("heartbeat", agent_id), what="a heartbeat")[-1].data
        assert beat["cluster_slug"] == slug
        assert beat["metrics_interval_seconds"] == 0.3
        assert beat["leader"] is None and beat["sync_interval_seconds"] is None
        view = wait_for(
            lambda: (v := _cluster(k8s_console, slug))["node_agents"] == 1 and v,
            what="the node agent counted on its cluster",
        )
        assert view["slug"] == slug

        kubelet.answer = 403
        kubelet.wait_requests(4)
        kubelet.answer = 200
        since = time.monotonic()
        wait_for(
            lambda: any(
                "kubelet" in m.data["extra"] for m in observer.of("metrics", agent_id, since)
            ),
            what="kubelet metrics again",
        )
        kubelet.wait_requests(2)
        log = agent.log()
        assert log.count("kubelet metrics not flowing") == 1, log
        assert "403 Forbidden" in log and RBAC_FIX in log
        assert log.count("kubelet metrics flowing again") == 1
    finally:
        agent.stop()


def _cluster(console: ConsoleProcess, slug: str) -> dict:
    with console.client() as c:
        return json.loads(c.get(f"/api/v1/clusters/{slug}").text)
