"""Chart metadata, packaging and GitOps-stable rendering."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import yaml

import contracts
from testkit.chart import CHART, Helm

TEMPLATES = CHART / "templates"


def test_chart_version_and_app_version_are_the_project_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == contracts.VERSION
    assert chart["appVersion"] == contracts.VERSION


def test_the_chart_requires_kubernetes_1_26_or_newer():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.26.0-0"
    assert chart["apiVersion"] == "v2"


def test_templates_use_nothing_that_changes_between_renders():
    """Random or time-based values make Argo CD report drift on every sync."""
    forbidden = re.compile(
        r"\b(randAlpha|randAlphaNum|randNumeric|randAscii|randBytes|randInt|uuidv4|now|date"
        r"|dateInZone|unixEpoch|genCA|genPrivateKey|genSelfSignedCert|genSignedCert"
        r"|derivePassword|lookup)\b"
    )
    templates = sorted(TEMPLATES.iterdir())
    assert templates, f"no templates in {TEMPLATES}"
    for path in templates:
        # Comments may name the functions; only template actions count.
        actions = re.findall(r"\{\{(?!/\*)(.*?)\}\}", path.read_text(), re.S)
        used = sorted({m for a in actions for m in forbidden.findall(a)})
        assert used == [], f"{path.name} uses {used}"


def test_two_renders_of_the_same_values_are_byte_identical(helm: Helm, ci_values):
    args = ["template", "proxima-agent", str(CHART), "-n", "proxima-system"]
    args += ["-f", str(ci_values["ha"]), "--set", "namespace.create=true"]
    first, second = helm.run(args), helm.run(args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_helm_package_builds_the_chart_without_stray_files(helm: Helm, tmp_path: Path):
    done = helm.run(["package", str(CHART), "--destination", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    archive = tmp_path / f"proxima-agent-{contracts.VERSION}.tgz"
    with tarfile.open(archive) as tar:
        names = sorted(n.removeprefix("proxima-agent/") for n in tar.getnames())
    assert "values.schema.json" in names
    assert "README.md" in names
    assert "templates/NOTES.txt" in names
    assert not [n for n in names if n.startswith("ci/") or "golden" in n or n.endswith(".pyc")]


def test_notes_carry_the_pages_troubleshooting_commands(helm: Helm, ci_values):
    notes = helm.notes([ci_values["quick-start"]])
    for command in (
        "kubectl -n proxima-system get pods",
        "kubectl -n proxima-system logs daemonset/proxima-agent-node-agent",
        "kubectl -n proxima-system logs statefulset/proxima-agent-cluster-agent",
        'kubectl -n proxima-system logs daemonset/proxima-agent-node-agent | grep "enrolled"',
        'kubectl -n proxima-system logs daemonset/proxima-agent-node-agent | grep "nats"',
        "kubectl get ds -n proxima-system proxima-agent-node-agent",
        "| grep -x '/var/lib/proxima-agent'",
    ):
        assert command in notes, command


def test_notes_name_only_the_components_that_are_deployed(helm: Helm, ci_values):
    node_only = helm.notes([ci_values["node-only"]])
    assert "statefulset/" not in node_only and "Cluster slug" not in node_only
    cluster_only = helm.notes([ci_values["cluster-only"]])
    assert "daemonset/" not in cluster_only and "Cluster slug: my-cluster" in cluster_only


def test_notes_do_not_suggest_moving_a_data_directory_that_was_already_moved(helm: Helm, ci_values):
    moved = helm.notes([ci_values["host-agent-coexistence"]])
    assert "Data directory on each node: /var/lib/proxima-node-agent" in moved
    assert "set nodeAgent.hostDataDir=/var/lib/proxima-node-agent there" not in moved
    default = helm.notes([ci_values["quick-start"]])
    assert "set nodeAgent.hostDataDir=/var/lib/proxima-node-agent there" in default
