"""On the tests/cluster lane's control plane (kube-apiserver, controllers, kwok nodes): the
release installs from both authenticated publications, as the chart's page installs it (`helm
repo add … --username … --password-stdin` + `helm install proxima/proxima-agent`; `helm registry
login` + `helm install oci://…`), with a read-only deploy token, not the chart's directory, and
every pod runs the image pinned by digest. A wrong password gets no chart."""

from __future__ import annotations

from typing import Any

import pytest

import contracts
from testkit.chart import RELEASE
from testkit.chart_repos import ChartRepository, RepoUsers
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.release import OciRegistry

pytestmark = pytest.mark.timeout(600)


def _install_and_check(
    cli: ClusterCli,
    cluster: KubeCluster,
    published: dict[str, Any],
    namespace: str,
    chart: str,
    *extra: str,
    values: str,
) -> None:
    installed = cli.helm(
        "install", RELEASE, chart, "--version", contracts.VERSION, *extra,
        "--namespace", namespace, "--create-namespace", "-f", values,
        "--wait", "--timeout", "180s",
    )  # fmt: skip
    assert "STATUS: deployed" in installed.stdout
    pods = cli.items("pods", "-n", namespace)
    assert len(pods) == cluster.nodes + 1  # a node agent per node, one collector
    for pod in pods:
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        assert [c["image"] for c in pod["spec"]["containers"]] == [published["image"]]
    chart_meta = cli.helm("list", "-n", namespace, "-o", "json").stdout
    assert f'"chart":"proxima-agent-{contracts.VERSION}"' in chart_meta.replace(" ", "")


def test_helm_install_from_the_oci_registry_onto_the_cluster(
    published: dict[str, Any],
    oci_registry: OciRegistry,
    repo_users: RepoUsers,
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    namespace: str,
    ci_values,
):
    chart = f"oci://{oci_registry.host}/proxima/charts/proxima-agent"
    login = ["registry", "login", oci_registry.host, "--plain-http", "--username"]
    user = repo_users.deploy
    refused = cluster_cli.helm(
        *login, user.username, "--password-stdin", stdin=user.wrong().password, check=False
    )
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr
    try:
        cluster_cli.helm(*login, user.username, "--password-stdin", stdin=user.password)
        _install_and_check(
            cluster_cli, kube_cluster, published, namespace, chart, "--plain-http",
            values=str(ci_values["quick-start"]),
        )  # fmt: skip
    finally:
        cluster_cli.helm("registry", "logout", oci_registry.host, check=False)


def test_helm_repo_add_with_a_deploy_token_then_install_onto_the_cluster(
    published: dict[str, Any],
    helm_repo: ChartRepository,
    repo_users: RepoUsers,
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    namespace: str,
    ci_values,
):
    user = repo_users.deploy
    add = ["repo", "add", "proxima-auth", helm_repo.url, "--username", user.username]
    refused = cluster_cli.helm(*add, "--password-stdin", stdin=user.wrong().password, check=False)
    assert refused.returncode != 0 and "401 Unauthorized" in refused.stderr, refused.stderr
    try:
        cluster_cli.helm(*add, "--password-stdin", stdin=user.password)
        _install_and_check(
            cluster_cli, kube_cluster, published, namespace, "proxima-auth/proxima-agent",
            values=str(ci_values["quick-start"]),
        )  # fmt: skip
    finally:
        cluster_cli.helm("repo", "remove", "proxima-auth", check=False)
