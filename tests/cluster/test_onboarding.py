"""The ``/clusters/add`` wizard and ``enrollment-check`` against the real control plane.

An operator signs in to a real Console, adds a cluster in the wizard and runs what the
onboarding page shows — its ``helm upgrade --install`` command, or (with "the nodes already run
the host agent" ticked, and real host agents on the nodes) its values-file variant: the Secret's
kubectl commands, the values file, ``helm … -f`` — with the real helm and kubectl, the chart from
its directory instead of the chart repository, everything else word for word, against the real
API server. The controllers make the pods (a tainted control-plane node gets none); the kubelet
double (``testkit/kubelet.py``) runs each one as a real agent configured from its pod (the
cluster agent in-cluster, with a ServiceAccount token the TokenRequest API bound to its pod).
The page's checklist turns green, and the ``enrollment-check`` flow, run against that cluster
and that Console, passes with the node agents counted against the nodes their DaemonSet is
scheduled on (and fails, naming what is missing, before the install). The audit's DaemonSet
check on the real cluster is in ``test_audit_daemonsets.py``."""

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
from testkit.agents import AgentProcess
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
VALUES_FILE = "proxima-agent-values.yaml"
HOST_AGENT_DIR = "/var/lib/proxima-agent"
NODE_AGENT_DIR = "/var/lib/proxima-node-agent"  # what the page's host-agent box sets
CONTROL_PLANE = "kwok-control-plane"
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


@pytest.fixture
def wizard_namespace(cluster_cli: ClusterCli) -> Iterator[str]:
    yield NAMESPACE
    cluster_cli.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)
    # Waited on: the next test's commands create proxima-system again.
    cluster_cli.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")


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
    # The Console points its commands at the chart's directory (PROXIMA_CHART_REF), so the
    # page's commands run verbatim; tests/release runs them against the published chart.
    console: ConsoleProcess = console_factory(
        name="wizard-console",
        env={"PROXIMA_PREFECT_API_URL": prefect_api_url, "PROXIMA_CHART_REF": str(CHART)},
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.worker_token())
    return console


def add_cluster(web: httpx.Client, name: str, host_agent: bool = False) -> str:
    """The wizard's form, submitted: where it sends the operator next."""
    form = web.get("/clusters/add")
    assert form.status_code == 200, form.text[:500]
    match = CSRF.search(form.text)
    assert match, form.text[:500]
    answer = web.post(
        "/clusters/add",
        data={
            "name": name,
            "slug": "",
            "expires": "",
            "csrf_token": match[1],
            **({"host_agent": "1"} if host_agent else {}),
        },
    )
    assert answer.status_code == 303, answer.text[:2000]
    return str(answer.headers["location"])


def copyblock(page: str, block: str) -> str:
    match = re.search(rf'<pre id="{block}"[^>]*><code>(.*?)</code></pre>', page, re.S)
    assert match, f"no {block} on the page"
    return html.unescape(match[1])


def words(command: str) -> list[str]:
    return shlex.split(command.replace("\\\n", " "))


def from_chart_directory(command: str, values_file: Path | None = None) -> list[str]:
    """The page's ``helm upgrade --install`` as argv for the real helm, verbatim: the page
    names the chart's directory (``PROXIMA_CHART_REF``); only ``-f`` is where the operator
    saved the page's values file."""
    argv = words(command)
    assert argv[:5] == ["helm", "upgrade", "--install", RELEASE, str(CHART)], argv
    rest = argv[5:]
    if values_file is not None:
        at = rest.index("-f") + 1
        assert rest[at] == VALUES_FILE, rest
        rest[at] = str(values_file)
    return [*argv[1:5], *rest]


def run_the_page(cli: ClusterCli, page: str, variant: str, tmp_path: Path) -> str:
    """What the operator copies from the page and runs, in order; the ``helm`` command run."""
    if variant == "helm-command":
        command = copyblock(page, "helm-command")
        assert "YOUR_INSTALL_TOKEN" not in command
        installed = cli.helm(*from_chart_directory(command))
    else:  # the values-file variant: the Secret, the saved values file, helm -f
        for line in copyblock(page, "secret-command").replace("\\\n", " ").splitlines():
            argv = words(line)
            assert argv[0] == "kubectl", argv
            cli.kubectl(*argv[1:])
        values = tmp_path / VALUES_FILE
        values.write_text(copyblock(page, "values-file"))
        command = copyblock(page, "values-command")
        installed = cli.helm(*from_chart_directory(command, values))
    assert "STATUS: deployed" in installed.stdout, installed.stdout
    return command


@pytest.mark.parametrize("variant", ["helm-command", "values-file"])
def test_the_wizards_commands_onboard_the_real_cluster_and_enrollment_check_passes(
    variant: str,
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
    # The values-file run also ticks "the nodes already run the Proxima host agent", and they do.
    host_agent = variant == "values-file"
    web = browser(console.url)
    signed_in(web, console.token)
    onboarding = add_cluster(web, NAME, host_agent=host_agent)
    assert onboarding == f"/clusters/{SLUG}/onboarding" + ("?host_agent=1" if host_agent else "")
    page = web.get(onboarding).text
    status_url = f"/clusters/{SLUG}/onboarding/status"

    kubeconfig = str(kube_cluster.admin_kubeconfig)
    # Before anything is installed, the check fails and says what is missing.
    run = enrollment_check(
        cluster_slug=SLUG, deadline_seconds=0.5, poll_seconds=0.2, kubeconfig=kubeconfig,
        check_nodes=True, return_state=True,
    )  # fmt: skip
    assert run.is_failed(), run  # a failing check is a Failed run
    early = run.result(raise_on_failure=False)
    assert not early["passed"]
    assert "**Missing: enrollment, heartbeat, inventory, nodes.**" in early["report"]
    # No node-agent DaemonSet yet: every node is counted.
    assert (early["node_agents"], early["nodes"], early["cluster_nodes"]) == (0, nodes, nodes)

    hosts = [
        FakeHost(name, tmp_path / "nodes" / name, uuid.uuid4().hex, str(uuid.uuid4())).lay_out()
        for name in kube_cluster.node_names
    ]
    host_agents = [
        AgentProcess(
            host.path(HOST_AGENT_DIR),
            name=host.name,
            backend_url=console.url,
            install_token=console.install_token(),
            host_root=host.root,
            heartbeat="1s",
            log_path=tmp_path / "logs" / f"{host.name}-host.log",
        )
        for host in hosts
        if host_agent
    ]
    kubelet = KubeletDouble(kube_cluster, hosts, tmp_path / "kubelet", namespace=NAMESPACE)
    try:
        host_ids = {agent.name: agent.start().agent_id() for agent in host_agents}
        kubelet.start()
        started = time.monotonic()
        command = run_the_page(cluster_cli, page, variant, tmp_path)
        assert f"--namespace {NAMESPACE}" in command

        def checklist() -> dict[str, Any] | None:
            status: dict[str, Any] = web.get(status_url).json()
            return status if status["done"] and status["node_agents"] == len(hosts) else None

        status = wait_for(checklist, timeout=180, what="the wizard's checklist all green")
        took = time.monotonic() - started
        print(f"\nwizard's {variant} to a green checklist: {took:.1f} s")
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
        if host_agent:  # each node keeps its host agent; the node agent sits beside it
            daemonset = cluster_cli.get("daemonset", f"{RELEASE}-node-agent", "-n", NAMESPACE)
            volumes = daemonset["spec"]["template"]["spec"]["volumes"]
            data = next(v for v in volumes if v["name"] == "data")
            assert data["hostPath"]["path"] == NODE_AGENT_DIR
            by_key = {(a["agent_type"], a["name"]): a for a in agents}
            for name, host_id in host_ids.items():
                assert by_key[("host", name)]["id"] == host_id
                assert by_key[("host", name)]["status"] == "online"
                assert by_key[("k8s-node-monitor", name)]["id"] != host_id
    finally:
        kubelet.stop()
        for agent in host_agents:
            agent.stop()


def _bearer(console: ConsoleProcess) -> dict[str, str]:
    return {"Authorization": f"Bearer {console.token}"}
