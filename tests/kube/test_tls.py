"""HTTPS with a throwaway CA: the kubeconfig path and the in-cluster (service account) path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes.client as k8s
import pytest
from kubernetes import config
from kubernetes.config.incluster_config import InClusterConfigLoader

from testkit.kube import KubeApiDouble, objects


@pytest.fixture
def tls_kube() -> Iterator[KubeApiDouble]:
    with KubeApiDouble(tls=True) as double:
        double.put(objects.node("node-000"))
        yield double


def test_a_kubeconfig_client_verifies_the_double_s_certificate(
    tls_kube: KubeApiDouble, tmp_path: Path
) -> None:
    assert tls_kube.url.startswith("https://127.0.0.1:")
    path = tls_kube.write_kubeconfig(tmp_path / "kubeconfig")
    with config.new_client_from_config(config_file=str(path)) as client:
        assert [n.metadata.name for n in k8s.CoreV1Api(client).list_node().items] == ["node-000"]


def test_the_in_cluster_loader_connects_with_a_service_account_mount(
    tls_kube: KubeApiDouble, tmp_path: Path
) -> None:
    mount = tls_kube.write_service_account(tmp_path / "serviceaccount")
    configuration = k8s.Configuration()
    InClusterConfigLoader(
        token_filename=str(mount / "token"),
        cert_filename=str(mount / "ca.crt"),
        environ=tls_kube.in_cluster_env(),
    ).load_and_set(configuration)
    with k8s.ApiClient(configuration) as client:
        assert k8s.CoreV1Api(client).read_node("node-000").status.node_info.kubelet_version
    assert (mount / "namespace").read_text() == "proxima-system"
    assert tls_kube.requests()[-1].user == tls_kube.user
