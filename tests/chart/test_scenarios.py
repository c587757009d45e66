"""The scenario values files in chart/ci/: lint, render, validate against Kubernetes, snapshot.

Golden snapshots live in tests/chart/golden/<scenario>.yaml so a review shows what a template
change does to real manifests. Regenerate them with ``PROXIMA_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import kubernetes_validate
import pytest

from testkit.chart import KUBE_VERSIONS, NAMESPACE, RELEASE, Helm

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("PROXIMA_UPDATE_GOLDEN") == "1"
SCENARIOS = (
    "quick-start",
    "existing-secret",
    "custom-values",
    "host-agent-coexistence",
    "node-only",
    "cluster-only",
    "ha",
)
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace"}


def test_chart_ci_holds_exactly_the_seven_scenarios_of_the_page(ci_values: dict[str, Path]):
    assert sorted(ci_values) == sorted(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint_strict_passes_for_each_scenario(helm: Helm, ci_values, scenario: str):
    helm.lint([ci_values[scenario]])


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_document_is_valid_kubernetes_in_strict_mode(
    helm: Helm, ci_values, scenario: str, kube_version: str
):
    rendering = helm.template([ci_values[scenario]], kube_version=kube_version)
    assert rendering.documents
    for doc in rendering.documents:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            pytest.fail(
                f"{scenario}: {name} is invalid for {kube_version} at {where}: {exc.message}"
            )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_manifests_match_the_golden_snapshot(helm: Helm, ci_values, scenario: str):
    text = helm.template([ci_values[scenario]]).text
    golden = GOLDEN / f"{scenario}.yaml"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no snapshot {golden}: run with PROXIMA_UPDATE_GOLDEN=1"
    expected = golden.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                str(golden),
                "rendered",
            )
        )
        pytest.fail(
            f"render differs from {golden.name} (PROXIMA_UPDATE_GOLDEN=1 to accept):\n{diff}"
        )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_resource_carries_the_standard_labels_and_the_release_namespace(
    helm: Helm, ci_values, scenario: str
):
    documents = helm.template([ci_values[scenario]]).documents
    assert documents
    for doc in documents:
        meta = doc["metadata"]
        labels = meta["labels"]
        assert labels["app.kubernetes.io/name"] == "proxima-agent"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.8.0"
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta
        else:
            assert meta["namespace"] == NAMESPACE, f"{doc['kind']}/{meta['name']}"


def test_common_labels_and_annotations_reach_every_resource_and_pod(helm: Helm, ci_values):
    rendering = helm.template(
        [ci_values["ha"]],
        {
            "commonLabels.team": "platform",
            "commonAnnotations.owner": "sre@example.com",
            "namespace.create": True,
        },
    )
    assert rendering.documents
    for doc in rendering.documents:
        meta = doc["metadata"]
        assert meta["labels"]["team"] == "platform", doc["kind"]
        assert meta["annotations"]["owner"] == "sre@example.com", doc["kind"]
    for workload in (rendering.daemonset, rendering.statefulset):
        pod_meta = workload["spec"]["template"]["metadata"]
        assert pod_meta["labels"]["team"] == "platform"
        assert pod_meta["annotations"]["owner"] == "sre@example.com"


def test_common_labels_never_replace_the_selector_labels(helm: Helm, ci_values):
    rendering = helm.template(
        [ci_values["quick-start"]], {"commonLabels.app\\.kubernetes\\.io/name": "other"}
    )
    for workload in (rendering.daemonset, rendering.statefulset):
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/name"] == "proxima-agent"
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert all(pod_labels[k] == v for k, v in selector.items())


def test_selectors_never_carry_the_chart_or_app_version(helm: Helm, ci_values):
    rendering = helm.template([ci_values["ha"]])
    selectors = [
        rendering.daemonset["spec"]["selector"]["matchLabels"],
        rendering.statefulset["spec"]["selector"]["matchLabels"],
        rendering.get("PodDisruptionBudget", f"{RELEASE}-cluster-agent")["spec"]["selector"][
            "matchLabels"
        ],
        rendering.get("Service", f"{RELEASE}-cluster-agent")["spec"]["selector"],
    ]
    for selector in selectors:
        assert "helm.sh/chart" not in selector
        assert "app.kubernetes.io/version" not in selector
