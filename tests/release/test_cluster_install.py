"""On the tests/cluster lane's control plane (kube-apiserver, controllers, kwok nodes): the
release installs from the OCI registry, not the chart's directory, and every pod runs the image
pinned by digest."""

from __future__ import annotations

from typing import Any

import pytest

import contracts
from testkit.chart import RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.release import OciRegistry

pytestmark = pytest.mark.timeout(600)

NAMESPACE = "release-from-oci"


def test_helm_install_from_the_oci_registry_onto_the_cluster(
    published: dict[str, Any],
    oci_registry: OciRegistry,
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    ci_values,
):
    chart = f"oci://{oci_registry.host}/proxima/charts/proxima-agent"
    try:
        installed = cluster_cli.helm(
            "install",
            RELEASE,
            chart,
            "--version",
            contracts.VERSION,
            "--plain-http",
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "-f",
            str(ci_values["quick-start"]),
            "--wait",
            "--timeout",
            "180s",
        )
        assert "STATUS: deployed" in installed.stdout
        pods = cluster_cli.items("pods", "-n", NAMESPACE)
        assert len(pods) == kube_cluster.nodes + 1  # a node agent per node, one collector
        for pod in pods:
            assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
            assert [c["image"] for c in pod["spec"]["containers"]] == [published["image"]]
        chart_meta = cluster_cli.helm("list", "-n", NAMESPACE, "-o", "json").stdout
        assert f'"chart":"proxima-agent-{contracts.VERSION}"' in chart_meta.replace(" ", "")
    finally:
        cluster_cli.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)
        cluster_cli.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
