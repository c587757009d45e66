"""Inventory on the real server: 5,000 real pod objects, created through kube-apiserver and run
by kwok, inventoried by the collector with the chart's ServiceAccount token. Prints the relist
time and the collector's peak RSS; ``python -m bench.cluster_inventory`` prints the double's.
(Runs last in the lane: the file name sorts after the others.)"""

from __future__ import annotations

import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kubernetes.client as k8s
import pytest

from testkit.chart import RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.console import ConsoleProcess
from testkit.k8s import cluster_agent, cluster_view, register_cluster, stop_all
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(900)

PODS = 5000
SCALE_NAMESPACE = "scale"
RELIST = re.compile(r"published: .*relist ([0-9.]+)s \((\d+) requests\)")


def _pod(index: int, node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"web-{index:05d}", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "web", "image": "nginx"}]},
    }


def create_pods(cluster: KubeCluster, count: int) -> float:
    started = time.monotonic()

    def create(chunk: range) -> None:
        with cluster.api_client() as client:
            core = k8s.CoreV1Api(client)
            for i in chunk:
                node = cluster.node_names[i % cluster.nodes]
                core.create_namespaced_pod(SCALE_NAMESPACE, _pod(i, node))  # type: ignore[arg-type]

    workers = 8
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, [range(w, count, workers) for w in range(workers)]))
    return time.monotonic() - started


def _vm(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture
def installed(cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str) -> str:
    cluster_cli.install(namespace, "-f", str(ci_values["quick-start"]), wait=False)
    return namespace


def test_5000_real_pods_are_inventoried_through_the_real_server(
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    k8s_console: ConsoleProcess,
    installed: str,
    tmp_path: Path,
) -> None:
    cluster_cli.kubectl("create", "namespace", SCALE_NAMESPACE)
    try:
        seconds = create_pods(kube_cluster, PODS)
        print(f"\ncreated {PODS} pods through kube-apiserver in {seconds:.1f} s")
        env = cluster_cli.service_account_env(
            installed, f"{RELEASE}-cluster-agent", tmp_path / "collector.kubeconfig"
        )
        slug, token = register_cluster(k8s_console, "Real Scale")
        agent = cluster_agent(
            tmp_path, k8s_console, env, token=token, cluster_name="Real Scale",
            env={
                "PROXIMA_POD_NAMESPACE": installed,
                "PROXIMA_CLUSTER_SLUG": slug,
                "PROXIMA_POD_LIMIT": str(PODS + 100),
                "PROXIMA_SYNC_INTERVAL": "3s",
            },
        ).start()  # fmt: skip
        try:
            wait_for(lambda: len(RELIST.findall(agent.log())) >= 3, timeout=300, what="3 syncs")
            assert agent.process is not None
            peak = _vm(agent.process.pid, "VmHWM")
            relists = [(float(s), int(n)) for s, n in RELIST.findall(agent.log())]
            view = wait_for(
                lambda: (
                    (v := cluster_view(k8s_console, slug))["counts"].get("pods", 0) >= PODS and v
                ),
                timeout=60,
                what="5,000 pods in the Console",
            )
        finally:
            stop_all([agent])
        times = [s for s, _ in relists]
        print(
            f"real server: {view['counts']['pods']} pods inventoried, relist median "
            f"{statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} syncs "
            f"({relists[0][1]} paginated list calls); collector peak RSS {peak:.1f} MiB"
        )
        assert view["counts"]["pods"] == len(cluster_cli.items("pods", "-A"))
        assert peak <= 256
    finally:
        cluster_cli.kubectl(
            "delete", "namespace", SCALE_NAMESPACE, "--wait=false", "--ignore-not-found"
        )
