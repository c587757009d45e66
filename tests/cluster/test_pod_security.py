"""Pod Security admission in a real kube-apiserver decides where the agents may run.

The cluster agent meets ``restricted``. The node agent mounts host paths (its data directory,
``/proc``, ``/sys``, ``/etc/machine-id``, ``/sys/class/dmi/id``) and runs as root, which
``baseline`` and ``restricted`` both refuse: its namespace must be labelled
``pod-security.kubernetes.io/enforce: privileged`` (or carry no enforce label on a cluster
whose default is privileged). docs/chart.md says so; these tests show both sides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.chart import RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

DAEMONSET = f"{RELEASE}-node-agent"
STATEFULSET = f"{RELEASE}-cluster-agent"
TOKEN_SECRET = ("--from-literal=token=YOUR_INSTALL_TOKEN",)


def labelled_namespace(cli: ClusterCli, name: str, level: str) -> None:
    cli.kubectl("create", "namespace", name)
    labels = [f"pod-security.kubernetes.io/{mode}={level}" for mode in ("enforce", "warn", "audit")]
    cli.kubectl("label", "namespace", name, *labels)
    cli.kubectl(
        "-n", name, "create", "secret", "generic", "proxima-install-token", *TOKEN_SECRET
    )  # fmt: skip


def test_the_cluster_agent_is_admitted_where_restricted_is_enforced(
    cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str
) -> None:
    labelled_namespace(cluster_cli, namespace, "restricted")
    done = cluster_cli.install(namespace, "-f", str(ci_values["cluster-only"]))
    assert "would violate PodSecurity" not in done.stderr
    sts = cluster_cli.get("statefulset", STATEFULSET, "-n", namespace)
    assert sts["status"]["readyReplicas"] == 1
    assert cluster_cli.events(namespace, "FailedCreate") == []


# What each level says about the node agent's pod (the real server's words).
REFUSALS = {
    "baseline": ("hostPath volumes",),
    "restricted": ('restricted volume types (volumes "data", "host-proc"', "runAsUser=0"),
}


@pytest.mark.parametrize("level", list(REFUSALS))
def test_the_node_agent_is_refused_where_privileged_is_not_allowed(
    cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str, level: str
) -> None:
    labelled_namespace(cluster_cli, namespace, level)
    # helm install succeeds (a DaemonSet is not a pod) and passes on the server's warning ...
    done = cluster_cli.install(namespace, "-f", str(ci_values["node-only"]), wait=False)
    warning = done.stderr.replace('\\"', '"')  # helm 4 logs it klog-style, quotes escaped
    assert f'Warning: would violate PodSecurity "{level}:latest"' in warning
    assert all(reason in warning for reason in REFUSALS[level]), warning
    # ... but the DaemonSet controller's pods are refused, and it says why in an event.
    refused = wait_for(
        lambda: cluster_cli.events(namespace, "FailedCreate"),
        timeout=60,
        what="a FailedCreate event from the DaemonSet controller",
    )
    message = refused[0]["message"]
    assert refused[0]["involvedObject"]["name"] == DAEMONSET
    assert f'violates PodSecurity "{level}:latest"' in message
    assert all(reason in message for reason in REFUSALS[level]), message
    print(f"{level}: {message}")
    assert cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET) == []
    # helm install --wait would time out on it; the page's install is in an unlabelled namespace.


def test_the_node_agent_runs_where_privileged_is_enforced(
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    ci_values: dict[str, Path],
    namespace: str,
) -> None:
    labelled_namespace(cluster_cli, namespace, "privileged")
    done = cluster_cli.install(namespace, "-f", str(ci_values["existing-secret"]))
    assert "PodSecurity" not in done.stderr
    pods = cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET)
    assert len(pods) == kube_cluster.nodes
    assert cluster_cli.events(namespace, "FailedCreate") == []


def test_namespace_create_labels_the_namespace_helm_created_and_uninstall_keeps_it(
    cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str
) -> None:
    values = ("-f", str(ci_values["quick-start"]), "--set", "namespace.create=true")
    # Without --create-namespace Helm has nowhere to keep its release record.
    refused = cluster_cli.install(namespace, *values, create_namespace=False, check=False)
    assert refused.returncode == 1
    assert f'create: failed to create: namespaces "{namespace}" not found' in refused.stderr

    cluster_cli.install(namespace, *values)  # --create-namespace, --wait
    labels = cluster_cli.get("namespace", namespace)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    cluster_cli.uninstall(namespace)  # no "Failed to purge the release"
    assert cluster_cli.get("namespace", namespace)["status"]["phase"] == "Active"
    assert cluster_cli.helm("list", "-n", namespace, "-q").stdout.strip() == ""


def test_namespace_create_with_another_name_deploys_the_agents_there(
    cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str
) -> None:
    target = f"{namespace}-agents"
    cluster_cli.kubectl("create", "namespace", namespace)
    try:
        cluster_cli.install(
            namespace, "-f", str(ci_values["quick-start"]),
            "--set", "namespace.create=true", "--set", f"namespace.name={target}",
            "--set", "nodeAgent.enabled=false", create_namespace=False,
        )  # fmt: skip
        labels = cluster_cli.get("namespace", target)["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        sts = cluster_cli.get("statefulset", STATEFULSET, "-n", target)
        assert sts["status"]["readyReplicas"] == 1
        assert cluster_cli.items("pods", "-n", namespace) == []
    finally:
        cluster_cli.helm("uninstall", RELEASE, "-n", namespace, "--wait", check=False)
        cluster_cli.kubectl("delete", "namespace", target, "--wait=false", "--ignore-not-found")
