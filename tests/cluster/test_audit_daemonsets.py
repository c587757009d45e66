"""The audit's DaemonSet data-directory check reads the real cluster. The
flows' Kubernetes adapter lists the node-agent DaemonSets that ``helm install`` made, with
the host path of their ``data`` volume and the real node names; the rule flags the one that
shares the host agent's directory on a node that runs a host agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.audit import kubernetes_facts
from flows.audit_rules import AuditFacts, DaemonSetFact, daemonset_rules
from flows.kube import KubeTarget, agent_daemonsets, api_client
from testkit.chart import RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.views import agent_view

pytestmark = pytest.mark.timeout(600)

MOVED = "moved"  # a second release: its cluster-scoped RBAC objects must not collide


@pytest.fixture
def moved_namespace(cluster_cli: ClusterCli, namespace: str) -> Iterator[str]:
    name = f"{namespace}-moved"
    yield name
    cluster_cli.helm("uninstall", MOVED, "-n", name, "--ignore-not-found", check=False)
    cluster_cli.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


def facts(cluster: KubeCluster, namespace: str) -> list[DaemonSetFact]:
    api = api_client(KubeTarget(kubeconfig=str(cluster.admin_kubeconfig)))
    try:
        return agent_daemonsets(api, namespace)
    finally:
        api.close()


def test_the_audit_reads_each_daemonsets_data_directory_and_flags_the_shared_one(
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    ci_values: dict[str, Path],
    namespace: str,
    moved_namespace: str,
) -> None:
    cluster_cli.install(namespace, "-f", str(ci_values["quick-start"]), wait=False)
    cluster_cli.install(
        moved_namespace, "-f", str(ci_values["host-agent-coexistence"]),
        "--set", "installToken.value=YOUR_INSTALL_TOKEN",
        "--set", "installToken.existingSecret.name=", release=MOVED, wait=False,
    )  # fmt: skip
    default, moved = facts(kube_cluster, namespace), facts(kube_cluster, moved_namespace)
    nodes = tuple(sorted(kube_cluster.node_names))
    assert default == [
        DaemonSetFact(namespace, f"{RELEASE}-node-agent", "/var/lib/proxima-agent", nodes)
    ]
    assert moved == [
        DaemonSetFact(
            moved_namespace,
            f"{MOVED}-proxima-agent-node-agent",
            "/var/lib/proxima-node-agent",
            nodes,
        )
    ]

    host_agent = agent_view("host-1", "kwok-node-1", agent_type="host")

    findings = list(daemonset_rules(AuditFacts(agents=[host_agent], daemonsets=default + moved)))
    # What the scheduled run does: no parameters, the worker's KUBECONFIG names the cluster.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_cluster.admin_kubeconfig))
        assert kubernetes_facts(None, None, namespace) == (default, None)
    assert [(f.name, f.subject_id, f.detail) for f in findings] == [
        ("shared_data_dir", f"{namespace}/{RELEASE}-node-agent", {"nodes": ["kwok-node-1"]})
    ]
