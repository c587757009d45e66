"""Item 7: the ``/clusters/add`` wizard and ``enrollment-check`` against the real control plane.

An operator signs in to a real Console, adds a cluster in the wizard and runs the ``helm upgrade
--install`` command the onboarding page shows — with the real helm, from the chart's directory
instead of the chart repository, everything else word for word — against the real API server.
The controllers make the pods; the kubelet double (``testkit/kubelet.py``) runs each one as a
real agent configured from its pod (the cluster agent in-cluster, with a ServiceAccount token the
TokenRequest API bound to its pod). The page's checklist turns green, and the ``enrollment-check``
flow, run against that cluster and that Console, passes with every node's agent counted (and
fails, naming what is missing, before the install). The audit's part of item 7 is in
``test_audit_daemonsets.py``."""

from __future__ import annotations

import html
import re
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flows.enrollment_check import enrollment_check
from testkit.chart import CHART, RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.console import ConsoleProcess
from testkit.kubelet import FakeHost, KubeletDouble
from testkit.signing_in import CSRF, browser, signed_in
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

NAMESPACE = "proxima-system"  # the wizard's commands name it
NAME = "Staging kwok (eu), blue"
SLUG = "staging-kwok-eu-blue"
CONTROL_PLANE = "kwok-control-plane"
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


@pytest.fixture
def wizard_namespace(cluster_cli: ClusterCli) -> Iterator[str]:
    yield NAMESPACE
    cluster_cli.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)
    cluster_cli.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


@pytest.fixture
def control_plane_node(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fourth node, tainted as a control-plane node is: the chart's default tolerations keep
    the node agent off it (docs/chart.md), so it must not count as a missing node agent."""
    kube_cluster.add_nodes([CONTROL_PLANE], taints=[CONTROL_PLANE_TAINT])
    try:
        yield CONTROL_PLANE
    finally:
        kube_cluster.delete_nodes([CONTROL_PLANE])


@pytest.fixture
def wizard_console(
    console_factory: Any, prefect_api_url: str, monkeypatch: pytest.MonkeyPatch
) -> ConsoleProcess:
    console: ConsoleProcess = console_factory(
        name="wizard-console", env={"PROXIMA_PREFECT_API_URL": prefect_api_url}
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.token)
    return console


def add_cluster(web: httpx.Client, name: str) -> str:
    """The wizard's form, submitted: where it sends the operator next."""
    form = web.get("/clusters/add")
    assert form.status_code == 200, form.text[:500]
    match = CSRF.search(form.text)
    assert match, form.text[:500]
    answer = web.post(
        "/clusters/add",
        data={"name": name, "slug": "", "expires": "", "csrf_token": match[1]},
    )
    assert answer.status_code == 303, answer.text[:2000]
    return str(answer.headers["location"])


def copyblock(page: str, block: str) -> str:
    match = re.search(rf'<pre id="{block}"[^>]*><code>(.*?)</code></pre>', page, re.S)
    assert match, f"no {block} on the page"
    return html.unescape(match[1])


def from_chart_directory(command: str) -> list[str]:
    """The page's command as argv for the real helm, the chart taken from its directory."""
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:5] == ["helm", "upgrade", "--install", RELEASE, "proxima/proxima-agent"], words
    return [*words[1:4], str(CHART), *words[5:]]


def test_the_wizards_helm_command_onboards_the_real_cluster_and_enrollment_check_passes(
    kube_cluster: KubeCluster,
    cluster_cli: ClusterCli,
    wizard_console: ConsoleProcess,
    wizard_namespace: str,
    control_plane_node: str,
    tmp_path: Path,
) -> None:
    console = wizard_console
    nodes = kube_cluster.nodes + 1  # the tainted control-plane node too
    workers = kube_cluster.nodes
    web = browser(console.url)
    signed_in(web, console.token)
    onboarding = add_cluster(web, NAME)
    assert onboarding == f"/clusters/{SLUG}/onboarding"
    page = web.get(onboarding).text
    command = copyblock(page, "helm-command")
    argv = from_chart_directory(command)
    assert f"--namespace {NAMESPACE}" in command and "YOUR_INSTALL_TOKEN" not in command

    kubeconfig = str(kube_cluster.admin_kubeconfig)
    # Before anything is installed, the check fails and says what is missing.
    early = enrollment_check(
        cluster_slug=SLUG, deadline_seconds=0.5, poll_seconds=0.2, kubeconfig=kubeconfig,
        check_nodes=True,
    )  # fmt: skip
    assert not early["passed"]
    assert "**Missing: enrollment, heartbeat, inventory, nodes.**" in early["report"]
    # No node-agent DaemonSet yet: every node is counted.
    assert (early["node_agents"], early["nodes"], early["cluster_nodes"]) == (0, nodes, nodes)

    hosts = [
        FakeHost(name, tmp_path / "nodes" / name, uuid.uuid4().hex, str(uuid.uuid4())).lay_out()
        for name in kube_cluster.node_names
    ]
    with KubeletDouble(kube_cluster, hosts, tmp_path / "kubelet", namespace=NAMESPACE) as kubelet:
        started = time.monotonic()
        installed = cluster_cli.helm(*argv)
        assert "STATUS: deployed" in installed.stdout, installed.stdout

        def checklist() -> dict[str, Any] | None:
            status: dict[str, Any] = web.get(f"{onboarding}/status").json()
            return status if status["done"] and status["node_agents"] == len(hosts) else None

        status = wait_for(checklist, timeout=180, what="the wizard's checklist all green")
        took = time.monotonic() - started
        print(f"\nwizard command to a green checklist: {took:.1f} s")
        assert [c["key"] for c in status["checks"] if c["ok"]] == [
            "enrollment",
            "heartbeat",
            "inventory",
        ]
        assert status["nodes"] == nodes  # the inventory's count
        page = web.get(onboarding).text
        assert "3 of 3 checks passed: the cluster is onboarded." in page
        assert '<p id="onboarding-done" class="flash flash-ok">' in page

        result = enrollment_check(
            cluster_slug=SLUG, deadline_seconds=60, poll_seconds=0.5, kubeconfig=kubeconfig,
            check_nodes=True,
        )  # fmt: skip
        assert result["passed"], result["report"]
        # The DaemonSet controller schedules the node agent on the 3 untainted nodes: that is
        # what the check counts, and it says why the fourth node has none.
        assert (result["node_agents"], result["nodes"], result["cluster_nodes"]) == (
            workers,
            workers,
            nodes,
        )
        scheduled = f"node agents 3/3 (the node-agent DaemonSet is scheduled on 3 of the {nodes}"
        assert scheduled in result["report"]
        assert result["collector"] == f"{RELEASE}-cluster-agent-0"
        assert "Missing" not in result["report"]

        # What the Console now holds came from the pods the controllers made on the real nodes.
        with console.client() as c:
            agents = c.get("/api/v1/fleet/agents", params={"limit": 100}).json()["items"]
        monitors = sorted(a["name"] for a in agents if a["agent_type"] == "k8s-node-monitor")
        assert monitors == sorted(kube_cluster.node_names)
        cluster = web.get(f"/api/v1/clusters/{SLUG}", headers=_bearer(console)).json()
        assert cluster["counts"]["nodes"] == nodes, cluster["counts"]
        assert kubelet.failures == {}
        pods = [p["metadata"]["name"] for p in cluster_cli.items("pods", "-n", NAMESPACE)]
        assert sorted(kubelet.started) == sorted(f"{NAMESPACE}/{name}" for name in pods)


def _bearer(console: ConsoleProcess) -> dict[str, str]:
    return {"Authorization": f"Bearer {console.token}"}
