"""``helm install`` / ``upgrade`` / ``uninstall`` of chart/proxima-agent, from its
directory, with the page's values, against a real kube-apiserver whose DaemonSet and StatefulSet
controllers make the pods and whose kwok nodes run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.chart import CHART, RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli

pytestmark = pytest.mark.timeout(600)

DAEMONSET = f"{RELEASE}-node-agent"
STATEFULSET = f"{RELEASE}-cluster-agent"
# scenario -> (node agent enabled, cluster agent replicas)
SCENARIOS = {
    "quick-start": (True, 1),
    "existing-secret": (True, 1),
    "custom-values": (True, 1),
    "host-agent-coexistence": (True, 1),
    "node-only": (True, 0),
    "cluster-only": (False, 1),
    "ha": (True, 2),
}


def prepare(cli: ClusterCli, namespace: str, values: Path) -> None:
    """What the page has the operator do before ``helm install``: the token's Secret, when the
    values name one. (Claims bind to the cluster's default StorageClass, as on a real cluster.)"""
    cli.kubectl("create", "namespace", namespace)
    if "existingSecret" in values.read_text():
        cli.kubectl(
            "-n", namespace, "create", "secret", "generic", "proxima-install-token",
            "--from-literal=token=YOUR_INSTALL_TOKEN",
        )  # fmt: skip


def assert_node_agent_everywhere(cli: ClusterCli, cluster: KubeCluster, namespace: str) -> None:
    ds = cli.get("daemonset", DAEMONSET, "-n", namespace)
    status = ds["status"]
    assert status["desiredNumberScheduled"] == cluster.nodes, status
    assert status["numberReady"] == cluster.nodes, status
    assert status.get("updatedNumberScheduled") == cluster.nodes, status
    pods = cli.pods_of(namespace, "DaemonSet", DAEMONSET)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(cluster.node_names)
    assert {p["status"]["phase"] for p in pods} == {"Running"}


def assert_cluster_agents(cli: ClusterCli, namespace: str, replicas: int) -> list[dict[str, Any]]:
    sts = cli.get("statefulset", STATEFULSET, "-n", namespace)
    assert sts["status"].get("readyReplicas") == replicas, sts["status"]
    pods = cli.pods_of(namespace, "StatefulSet", STATEFULSET)
    assert sorted(p["metadata"]["name"] for p in pods) == [
        f"{STATEFULSET}-{i}" for i in range(replicas)
    ]
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    return pods


def server_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning" in line.lower()]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_install_upgrade_uninstall_with_the_pages_values(
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    ci_values: dict[str, Path],
    namespace: str,
    scenario: str,
) -> None:
    node_agent, replicas = SCENARIOS[scenario]
    values = ci_values[scenario]
    prepare(cluster_cli, namespace, values)

    installed = cluster_cli.install(namespace, "-f", str(values))
    assert "STATUS: deployed" in installed.stdout
    assert server_warnings(installed.stderr) == []
    if node_agent:
        assert_node_agent_everywhere(cluster_cli, kube_cluster, namespace)
    else:
        assert cluster_cli.items("daemonsets", "-n", namespace) == []
    if replicas:
        before = assert_cluster_agents(cluster_cli, namespace, replicas)
    else:
        assert cluster_cli.items("statefulsets", "-n", namespace) == []

    # An upgrade that changes the pod templates: the controllers replace every pod.
    upgraded = cluster_cli.install(
        namespace, "-f", str(values), "--set", "commonLabels.upgraded=yes", verb="upgrade"
    )
    assert "REVISION: 2" in upgraded.stdout
    if node_agent:
        assert_node_agent_everywhere(cluster_cli, kube_cluster, namespace)
        pods = cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET)
        assert {p["metadata"]["labels"].get("upgraded") for p in pods} == {"yes"}
    if replicas:
        after = assert_cluster_agents(cluster_cli, namespace, replicas)
        assert {p["metadata"]["labels"].get("upgraded") for p in after} == {"yes"}
        assert {p["metadata"]["uid"] for p in after}.isdisjoint(
            p["metadata"]["uid"] for p in before
        )

    cluster_cli.uninstall(namespace)
    assert cluster_cli.items("daemonsets,statefulsets,services", "-n", namespace) == []
    left = cluster_cli.kubectl(
        "get", "clusterroles,clusterrolebindings", "-l",
        f"app.kubernetes.io/instance={RELEASE}", "-o", "name",
    ).stdout  # fmt: skip
    assert left == ""


def test_install_wait_fails_and_says_why_when_no_storage_class_can_bind_the_claim(
    cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str
) -> None:
    """The Quick Start claims a volume from the default StorageClass (the test cluster has one);
    naming a class that does not exist is a cluster without one: the page's troubleshooting row."""
    done = cluster_cli.helm(
        "install", RELEASE, str(CHART), "-n", namespace, "--create-namespace",
        "-f", str(ci_values["quick-start"]),
        "--set", "clusterAgent.persistence.storageClassName=missing",
        "--wait", "--timeout", "20s", check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"StatefulSet/{namespace}/{STATEFULSET} not ready" in done.stderr
    events = cluster_cli.events(namespace, "FailedScheduling")
    assert any("unbound immediate PersistentVolumeClaims" in e["message"] for e in events)
    # The node agent is not held up by it.
    pods = cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET)
    assert pods and {p["status"]["phase"] for p in pods} == {"Running"}
