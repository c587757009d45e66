"""Argo CD's ``CreateNamespace=true`` on a cluster whose Pod Security default is ``restricted``.

Argo CD creates the destination namespace with no labels and applies what ``helm template``
renders into it. Under a cluster-wide enforced ``restricted`` (or ``baseline``) default, such
a namespace admits the cluster agent but refuses every node-agent pod (host paths, root): the
DaemonSet exists and has 0 pods. The Application the wizard writes (docs/chart.md "GitOps
(Argo CD)") labels the namespace through ``managedNamespaceMetadata``; with that label the
DaemonSet controller's next attempt makes a pod on every node.

The control plane here is a second one of the lane's (``start_kube_cluster``) whose
kube-apiserver reads an AdmissionConfiguration with PodSecurity defaults ``restricted``. On it
too: the wizard's Argo CD repository Secret, made by its commands run in bash.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.web.install_commands import ARGO_REPO_SECRET, InstallPlan
from testkit.chart import CHART, RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.fixtures import start_kube_cluster
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

NAMESPACE = "proxima-system"  # the Application's destination
DAEMONSET = f"{RELEASE}-node-agent"
STATEFULSET = f"{RELEASE}-cluster-agent"


@pytest.fixture(scope="module")
def restricted_cluster(
    tools: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeCluster]:
    cluster = start_kube_cluster(
        tools, tmp_path_factory.mktemp("restricted-cluster"), pod_security="restricted"
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cli(
    restricted_cluster: KubeCluster,
    helm_binary: Path,
    kubectl_binary: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> ClusterCli:
    return ClusterCli(
        restricted_cluster, helm_binary, kubectl_binary, tmp_path_factory.mktemp("cli")
    )


def _application() -> dict[str, Any]:
    plan = InstallPlan(
        backend_url="https://api-console.prxm.uz",
        install_token="unused",  # the Application references the Secret
        cluster_name="my-cluster",
        cluster_slug="my-cluster",
        host_data_dir=None,
        chart_version="0.0.0",
        repo_url="https://charts.example/proxima",
    )
    rendered = plan.argo_application()
    assert rendered is not None
    application: dict[str, Any] = yaml.safe_load(rendered)
    return application


def _sync(cli: ClusterCli, application: dict[str, Any], values: Path) -> None:
    """What Argo CD does for the Application: ``helm template`` of the chart with its values,
    applied into the destination namespace."""
    rendered = cli.helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(values)
    ).stdout
    cli.kubectl("apply", "--namespace", NAMESPACE, "-f", "-", stdin=rendered)


def test_createnamespace_leaves_the_node_agent_podless_until_the_namespace_is_labelled(
    cli: ClusterCli, restricted_cluster: KubeCluster, tmp_path: Path
) -> None:
    application = _application()
    assert "CreateNamespace=true" in application["spec"]["syncPolicy"]["syncOptions"]
    values = tmp_path / "values.yaml"
    values.write_text(application["spec"]["source"]["helm"]["values"])
    try:
        # CreateNamespace=true alone: a namespace with no labels, under the restricted default.
        cli.kubectl("create", "namespace", NAMESPACE)
        labels = cli.get("namespace", NAMESPACE)["metadata"].get("labels", {})
        assert [key for key in labels if key.startswith("pod-security.kubernetes.io/")] == []
        cli.kubectl(
            "-n", NAMESPACE, "create", "secret", "generic", "proxima-install-token",
            "--from-literal=token=YOUR_INSTALL_TOKEN",
        )  # fmt: skip
        _sync(cli, application, values)
        refused = wait_for(
            lambda: cli.events(NAMESPACE, "FailedCreate"),
            timeout=60,
            what="a FailedCreate event from the DaemonSet controller",
        )
        assert refused[0]["involvedObject"]["name"] == DAEMONSET
        assert 'violates PodSecurity "restricted:latest"' in refused[0]["message"]
        assert cli.pods_of(NAMESPACE, "DaemonSet", DAEMONSET) == []
        # The cluster agent meets restricted: it runs all the same.
        wait_for(
            lambda: cli.get("statefulset", STATEFULSET, "-n", NAMESPACE)["status"].get(
                "readyReplicas"
            ) == 1,
            timeout=120,
            what="the cluster agent Ready",
        )  # fmt: skip

        # The documented step: the Application's managedNamespaceMetadata labels, which Argo
        # CD puts on the namespace it manages.
        managed = application["spec"]["syncPolicy"]["managedNamespaceMetadata"]["labels"]
        assert managed == {"pod-security.kubernetes.io/enforce": "privileged"}
        cli.kubectl(
            "label",
            "namespace",
            NAMESPACE,
            "--overwrite",
            *(f"{k}={v}" for k, v in managed.items()),
        )

        def running() -> list[dict[str, Any]] | None:
            pods = cli.pods_of(NAMESPACE, "DaemonSet", DAEMONSET)
            ok = [p for p in pods if p["status"].get("phase") == "Running"]
            return ok if len(ok) == restricted_cluster.nodes else None

        pods = wait_for(running, timeout=180, what="a running node agent on every node")
        assert sorted(p["spec"]["nodeName"] for p in pods) == restricted_cluster.node_names
    finally:
        cli.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


def test_the_wizards_argo_repository_secret_carries_the_token_it_read(
    cli: ClusterCli, kubectl_binary: Path
) -> None:
    """The Argo CD repository Secret the wizard's commands make, run in bash with the deploy
    token typed on stdin: the password arrives through kubectl's stdin, never its argv."""
    plan = InstallPlan(
        backend_url="https://api-console.prxm.uz",
        install_token="unused",
        cluster_name="my-cluster",
        cluster_slug="my-cluster",
        host_data_dir=None,
        chart_version="0.0.0",
        repo_url="https://charts.example/proxima",
    )
    script = plan.argo_repository_commands()
    assert script is not None
    token = secrets.token_urlsafe(24)
    cli.kubectl("create", "namespace", "argocd")
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            input=f"deploy-token\n{token}\n",
            env={**cli.env(), "PATH": f"{kubectl_binary.parent}:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert token not in done.stdout + done.stderr
        secret = cli.get("secret", ARGO_REPO_SECRET, "-n", "argocd")
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        assert data == {
            "type": "helm",
            "name": "proxima-agent",
            "url": "https://charts.example/proxima",
            "username": "deploy-token",
            "password": token,
        }
        labels = secret["metadata"]["labels"]
        assert labels["argocd.argoproj.io/secret-type"] == "repository"
    finally:
        cli.kubectl("delete", "namespace", "argocd", "--ignore-not-found", "--wait=false")
