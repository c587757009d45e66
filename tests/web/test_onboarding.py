"""The chart page's first promise, in a real browser: /clusters/add registers the cluster, mints its
install token, writes the helm command (and the values-file and Argo CD variants) with every
value filled in, then verifies enrollment, heartbeat and the first inventory sync.

Agents are started from what the page shows, the way the chart configures them from those
values: a real node monitor and a real cluster collector (against the Kubernetes API double).
The commands themselves are rendered by the real helm. The pending causes of each later step are
shown with a simulated collector (collector.py) that can be held between the steps.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import expect

from contracts.slugs import is_dns_label, slugify
from testkit import REPO
from testkit.collector import SimulatedCollector, helm_sets
from testkit.console import QUIET_ENV
from testkit.k8s import FAST_LEASE
from testkit.kube import FleetSpec, preload_fleet
from testkit.kube import objects as kube_objects

CHART = REPO / "chart" / "proxima-agent"
NAME = "Production RKE2 (eu), main"
SLUG = "production-rke2-eu-main"
HOST_AGENT_DIR = "/var/lib/proxima-node-agent"
REPO_URL = "https://charts.example/proxima"  # the Console's PROXIMA_CHART_REPO_URL


@pytest.fixture
def published_console(console_factory):  # type: ignore[no-untyped-def]
    """tests/web's Console naming the classic chart repository, as a Console of a published
    release does (``PROXIMA_CHART_REPO_URL``; it has no default)."""
    return console_factory(
        env={
            **QUIET_ENV,
            "PROXIMA_ROTATION_TIMEOUT_SECONDS": "10",
            "PROXIMA_CHART_REPO_URL": REPO_URL,
        }
    )


def _check(page, key: str):
    return page.locator(f'#checklist [data-check="{key}"]')


def _helm(tmp_path: Path, *args: str) -> dict:
    """``helm template`` of the repo's chart; the workloads' env and volumes by kind."""
    tool = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tools.py"), "helm"],
        capture_output=True,
        text=True,
        check=False,
    )
    if tool.returncode != 0:
        pytest.skip(f"no helm here: {tool.stderr.strip()}")
    home = tmp_path / "helm-home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(home / "kubeconfig"),
    }
    out = subprocess.run(
        [tool.stdout.strip(), "template", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def _env(workload: dict) -> dict:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _data_path(daemonset: dict) -> str:
    volumes = daemonset["spec"]["template"]["spec"]["volumes"]
    return next(v["hostPath"]["path"] for v in volumes if v["name"] == "data")


def _as_template(command: str, chart: Path) -> list[str]:
    """The page's ``helm upgrade --install`` as ``helm template`` of the local chart."""
    import shlex

    words = shlex.split(command.replace("\\\n", " "))
    assert words[:5] == ["helm", "upgrade", "--install", "proxima-agent", "proxima/proxima-agent"]
    rest = [w for w in words[5:] if w != "--create-namespace"]
    return ["proxima-agent", str(chart), *rest]


def test_the_wizard_onboards_a_cluster_until_all_three_checks_are_green(
    published_console, ui, agents, kube_api, tmp_path
):
    web_console = published_console
    view = ui(web_console)
    page = view.page
    view.goto("/clusters")
    page.get_by_role("link", name="Add a cluster").click()
    page.fill("#cluster-name", NAME)
    expect(page.locator("#cluster-slug")).to_have_value(SLUG)
    assert page.locator("#environment").input_value() == "acme / prod"

    page.fill("#cluster-slug", "Production_RKE2")
    expect(page.locator("#slug-error")).to_contain_text(
        'clusterAgent.clusterSlug "Production_RKE2" is not a DNS label'
    )
    page.click(
        "#cluster-form button[type=submit]"
    )  # the browser refuses: the slug field is invalid
    assert page.url.endswith("/clusters/add")
    page.fill("#cluster-slug", "")  # cleared: derived from the name again
    expect(page.locator("#cluster-slug")).to_have_value(SLUG)
    expect(page.locator("#slug-error")).to_be_empty()
    page.check("#host-agent")
    view.shot("cluster-add")
    page.click("#cluster-form button[type=submit]")
    page.wait_for_url(re.compile(rf"/clusters/{SLUG}/onboarding\?host_agent=1$"))

    # The repository wants a deploy token: read without echo, handed to helm on stdin.
    assert page.locator("#helm-repo-add").inner_text() == (
        "read -rp 'Deploy token name: ' PROXIMA_REPO_USER\n"
        "read -rsp 'Deploy token: ' PROXIMA_REPO_TOKEN; echo\n"
        f"printf '%s' \"$PROXIMA_REPO_TOKEN\" | helm repo add proxima {REPO_URL} \\\n"
        '  --username "$PROXIMA_REPO_USER" --password-stdin\n'
        "unset PROXIMA_REPO_TOKEN\n"
        "helm repo update proxima"
    )
    command = page.locator("#helm-command").inner_text()
    values = helm_sets(command)
    assert command.startswith(
        "helm upgrade --install proxima-agent proxima/proxima-agent \\\n"
        "  --namespace proxima-system \\\n  --create-namespace \\\n"
    )
    assert values["backendUrl"] == web_console.url
    # No PROXIMA_PUBLIC_URL and a loopback address: the wizard says so beside the command.
    expect(page.locator("#backend-url-warning")).to_contain_text(
        "Agents on other machines cannot reach a loopback address"
    )
    expect(page.locator("#backend-url-warning")).to_contain_text("Set PROXIMA_PUBLIC_URL")
    assert values["installToken.value"].startswith("pxi_")
    assert values["clusterAgent.clusterName"] == NAME
    assert values["clusterAgent.clusterSlug"] == SLUG
    assert values["nodeAgent.hostDataDir"] == HOST_AGENT_DIR
    page.click('[data-copy="helm-command"]')
    expect(page.locator("#helm-command").locator("..").locator(".copy-status")).to_have_text(
        "Copied"
    )
    assert page.evaluate("navigator.clipboard.readText()") == command
    token = values["installToken.value"]

    view.shot("onboarding-command")
    for key in ("enrollment", "heartbeat", "inventory"):
        expect(_check(page, key)).to_have_class(re.compile("check-pending"))
    causes = _check(page, "enrollment").locator(".check-causes")
    expect(causes).to_contain_text("Cluster not appearing in Console")
    expect(causes).to_contain_text("Collector not enrolling")
    expect(causes).to_contain_text("verify install token")
    view.shot("onboarding-pending", focus="#checks-heading")
    page.locator("summary", has_text="Values-file variant").click()
    page.locator("summary", has_text="Argo CD Application").click()
    view.shot("onboarding-gitops", focus="#values-file-label")

    # What the page rendered is what Helm installs.
    rendered = _helm(tmp_path, *_as_template(command, CHART))
    collector_env = _env(rendered["StatefulSet/proxima-agent-cluster-agent"])
    assert collector_env["PROXIMA_CLUSTER_SLUG"] == SLUG
    assert collector_env["PROXIMA_CLUSTER_NAME"] == NAME
    assert collector_env["PROXIMA_BACKEND_URL"] == web_console.url
    assert _data_path(rendered["DaemonSet/proxima-agent-node-agent"]) == HOST_AGENT_DIR
    secret = rendered["Secret/proxima-agent-install-token"]
    assert "token" in (secret.get("stringData") or secret.get("data"))
    values_file = tmp_path / "proxima-agent-values.yaml"
    values_file.write_text(page.locator("#values-file").inner_text())
    from_file = _helm(tmp_path, "proxima-agent", str(CHART), "-f", str(values_file))
    assert (
        _env(from_file["StatefulSet/proxima-agent-cluster-agent"])["PROXIMA_CLUSTER_SLUG"] == SLUG
    )
    assert "Secret/proxima-agent-install-token" not in from_file  # existingSecret: never in Git
    app = yaml.safe_load(page.locator("#argo-application").inner_text())
    assert app["kind"] == "Application" and app["spec"]["source"]["chart"] == "proxima-agent"
    assert app["spec"]["source"]["repoURL"] == REPO_URL
    # CreateNamespace=true makes an unlabelled namespace: Argo CD labels it for the node agent.
    assert app["spec"]["syncPolicy"]["managedNamespaceMetadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged"
    }
    assert "--from-file=password=/dev/stdin" in page.locator("#argo-repository").inner_text()
    argo_values = tmp_path / "argo-values.yaml"
    argo_values.write_text(app["spec"]["source"]["helm"]["values"])
    from_argo = _helm(tmp_path, "proxima-agent", str(CHART), "-f", str(argo_values))
    assert _data_path(from_argo["DaemonSet/proxima-agent-node-agent"]) == HOST_AGENT_DIR
    assert token not in page.locator("#argo-application").inner_text()

    # A node agent started the way the chart starts it from these values.
    token_file = tmp_path / "etc-proxima-install-token" / "token"
    token_file.parent.mkdir()
    token_file.write_text(token)
    node = agents(
        web_console,
        "node-1",
        "",
        agent_type="k8s-node-monitor",
        backend_url=values["backendUrl"],
        data_dir=tmp_path / "host-node-1" / values["nodeAgent.hostDataDir"].lstrip("/"),
        env={
            "PROXIMA_INSTALL_TOKEN_FILE": str(token_file),
            "PROXIMA_CLUSTER_NAME": values["clusterAgent.clusterName"],
            "PROXIMA_CLUSTER_SLUG": values["clusterAgent.clusterSlug"],
        },
    )
    node.wait_ready()
    expect(page.locator("#node-agents .node-count")).to_have_text("1")

    # The cluster agent as the chart's StatefulSet runs it (pod name, token file, the page's
    # name and slug), against the Kubernetes API double; its sync interval differs from the
    # Console's PROXIMA_K8S_SYNC_INTERVAL (5m) on purpose: the drift warning must show.
    fleet = preload_fleet(
        kube_api, FleetSpec(pods=40, nodes=3, control_plane_nodes=1, app_namespaces=2, rollouts=1)
    )
    kube_api.put(kube_objects.namespace("proxima-system"))
    collector = agents(
        web_console,
        "proxima-agent-cluster-agent-0",
        "",
        agent_type="k8s-cluster-collector",
        backend_url=values["backendUrl"],
        heartbeat="0.5s",
        env={
            **kube_api.subprocess_env(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
            "PROXIMA_INSTALL_TOKEN_FILE": str(token_file),
            "PROXIMA_CLUSTER_NAME": values["clusterAgent.clusterName"],
            "PROXIMA_CLUSTER_SLUG": values["clusterAgent.clusterSlug"],
            "PROXIMA_POD_NAMESPACE": "proxima-system",
            "PROXIMA_LEASE_NAME": "proxima-agent-cluster-agent",
            "PROXIMA_REPLICAS": "1",
            "PROXIMA_SYNC_INTERVAL": "60s",
            **FAST_LEASE,
        },
    )
    for key in ("enrollment", "heartbeat", "inventory"):
        expect(_check(page, key)).to_have_class(re.compile("check-ok"), timeout=30_000)
    assert collector.alive
    expect(page.locator("#onboarding-done")).to_be_visible()
    expect(page.locator("#checks-summary")).to_have_text(
        "3 of 3 checks passed: the cluster is onboarded."
    )
    expect(page.locator("#node-agents")).to_contain_text(f"1 of {fleet.counts['Node']} nodes")
    expect(page.locator("#warnings")).to_contain_text("sync_interval_drift")
    view.shot("onboarding-done", focus="#checks-heading")

    page.get_by_role("link", name="Open the cluster").click()
    page.wait_for_url(re.compile(rf"/clusters/{SLUG}$"))
    expect(page.locator("main")).to_contain_text("sync_interval_drift")
    row = page.locator("tr", has_text="proxima-agent-cluster-agent-0")
    expect(row).to_contain_text("leader")
    view.shot("cluster")
    view.goto("/clusters")
    expect(page.locator("tr", has_text=SLUG)).to_contain_text(str(fleet.counts["Pod"]))
    view.shot("clusters")

    # A second visit (another tab, say) no longer has the token: it never left this session.
    with view.http() as http:
        again = http.get(f"/clusters/{SLUG}/onboarding").text
    assert token in again
    other = ui(web_console)
    other.goto(f"/clusters/{SLUG}/onboarding")
    assert token not in other.page.content()
    assert "YOUR_INSTALL_TOKEN" in other.page.locator("#helm-command").inner_text()


def test_the_pages_slug_rule_is_the_charts(web_console, ui):
    """The slug the browser derives as you type is the one contracts.slugs (and the chart)
    derive, on the docs' table and on random names."""
    view = ui(web_console)
    view.goto("/clusters/add")
    rng = random.Random(7)
    alphabet = "aZ09-_ .()\u2014\u0130K\u0422\u0430\u0448\u212a\U0001f600\t"
    names = [
        "my-cluster",
        "Production RKE2",
        "My Cluster (prod)",
        "eu_west_1.k8s",
        "--prod--eu--",
        "Toshkent — ishlab chiqarish",
        "\u0422\u0430\u0448\u043a\u0435\u043d\u0442 prod",
        "İstanbul",
        "\u212a8s",
        "a" * 62 + "-b",
        "x" * 100,
        *("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(300)),
    ]
    derived = view.page.evaluate("names => names.map(n => window.proxima.slugify(n))", names)
    assert derived == [slugify(n) for n in names]
    labels = ["a", "a-b", "-a", "a-", "A", "a" * 63, "a" * 64, "", "a_b", *derived]
    checked = view.page.evaluate("xs => xs.map(x => window.proxima.isDnsLabel(x))", labels)
    assert checked == [is_dns_label(x) for x in labels]


def test_a_name_without_letters_or_a_taken_slug_is_refused_with_the_charts_words(web_console, ui):
    view = ui(web_console)
    page = view.page
    view.goto("/clusters/add")
    page.fill("#cluster-name", "\u0422\u0430\u0448\u043a\u0435\u043d\u0442")
    expect(page.locator("#slug-error")).to_contain_text("has no letter or digit to derive a slug")
    with view.http() as http:
        csrf = view.csrf()
        r = http.post(
            "/clusters/add",
            data={
                "csrf_token": csrf,
                "name": "\u0422\u0430\u0448\u043a\u0435\u043d\u0442",
                "slug": "",
            },
        )
        assert r.status_code == 200 and "has no letter or digit" in r.text
        r = http.post("/clusters/add", data={"csrf_token": csrf, "name": "x", "slug": "a" * 64})
        assert r.status_code == 200 and "is not a DNS label" in r.text
        ok = http.post("/clusters/add", data={"csrf_token": csrf, "name": "Edge 1", "slug": ""})
        assert ok.status_code == 303
        taken = http.post("/clusters/add", data={"csrf_token": csrf, "name": "Edge 1"})
        assert taken.status_code == 200 and "already registered" in taken.text
        assert "/clusters/edge-1/onboarding" in taken.text


def test_each_pending_step_shows_its_likely_cause_until_it_turns_green(web_console, ui):
    """Step by step with a collector that can be held between steps (a real enrolled identity
    speaking the agent's wire format): enrolled but silent, then heartbeating without inventory."""
    view = ui(web_console)
    page = view.page
    view.goto("/clusters/add")
    page.fill("#cluster-name", "Edge 7")
    page.click("#cluster-form button[type=submit]")
    page.wait_for_url(re.compile(r"/clusters/edge-7/onboarding$"))
    values = helm_sets(page.locator("#helm-command").inner_text())
    assert "nodeAgent.hostDataDir" not in values
    collector = SimulatedCollector(
        web_console,
        name="proxima-agent-cluster-agent-0",
        slug=values["clusterAgent.clusterSlug"],
        cluster_name=values["clusterAgent.clusterName"],
    )
    collector.enroll(values["installToken.value"])
    expect(_check(page, "enrollment")).to_have_class(re.compile("check-ok"))
    expect(_check(page, "enrollment").locator(".check-causes")).to_be_hidden()
    expect(_check(page, "heartbeat").locator(".check-causes")).to_contain_text(
        "heartbeats go over NATS"
    )
    collector.heartbeat(sync_interval=300.0)
    expect(_check(page, "heartbeat")).to_have_class(re.compile("check-ok"))
    expect(_check(page, "inventory").locator(".check-causes")).to_contain_text(
        "this Console expects 5m (PROXIMA_K8S_SYNC_INTERVAL)"
    )
    assert collector.inventory(nodes=3, pods=400, sync_interval=300.0) > 1  # chunked
    expect(_check(page, "inventory")).to_have_class(re.compile("check-ok"))
    expect(page.locator("#checks-summary")).to_have_text(
        "3 of 3 checks passed: the cluster is onboarded."
    )
    expect(page.locator("#warnings")).to_be_hidden()


def test_a_console_naming_no_chart_repository_says_how_to_name_one(web_console, ui):
    """The wizard's repository used to default to a URL this project never publishes to; with
    PROXIMA_CHART_REPO_URL unset it invents none: it says what to set and its commands install
    this release's chart directory."""
    view = ui(web_console)
    view.goto("/clusters/add")
    view.page.fill("#cluster-name", "No repository")
    view.page.click("#cluster-form button[type=submit]")
    view.page.wait_for_url(re.compile(r"/clusters/no-repository/onboarding$"))
    page = view.page
    notice = page.locator("#chart-repo-unset")
    expect(notice).to_contain_text("This Console names no chart repository.")
    expect(notice).to_contain_text("PROXIMA_CHART_REPO_URL")
    expect(notice).to_contain_text("./chart/proxima-agent")
    assert page.locator("#helm-repo-add").count() == 0
    command = page.locator("#helm-command").inner_text()
    assert command.startswith("helm upgrade --install proxima-agent ./chart/proxima-agent \\\n")
    assert "--version" not in command  # a directory is this checkout's version
    page.locator("summary", has_text="Argo CD Application").click()
    expect(page.locator("#argo-unpublished")).to_contain_text("PROXIMA_CHART_REPO_URL")
    assert page.locator("#argo-application").count() == 0
    assert "gitlab" not in page.content()
