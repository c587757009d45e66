"""The cluster slug: derived from clusterName when empty, bounded to 63, shown in NOTES.

``slugify`` below is the rule docs/chart.md states for the agent and the Console to implement;
the chart's own helper must agree with it on every name, including non-ASCII ones.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from testkit.chart import CHART, REPO, Helm, env

DOCS = REPO / "docs" / "chart.md"


def slugify(name: str) -> str:
    """docs/chart.md, "The cluster slug", steps 1 to 5."""
    slug = re.sub(r"[^A-Za-z0-9-]+", "-", name).lower()
    slug = re.sub(r"-+", "-", slug).strip("-")
    return slug[:63].rstrip("-")


EXAMPLES = {
    "my-cluster": "my-cluster",
    "production-rke2": "production-rke2",
    "Production RKE2": "production-rke2",
    "My Cluster (prod)": "my-cluster-prod",
    "eu_west_1.k8s": "eu-west-1-k8s",
    "--prod--eu--": "prod-eu",
    "Toshkent — ishlab chiqarish": "toshkent-ishlab-chiqarish",
    "Ташкент prod": "prod",
    "İstanbul": "stanbul",
    "\u212a8s": "8s",  # KELVIN SIGN lowercases to "k" in Unicode: the rule never lowercases it
    "a" * 62 + "-b": "a" * 62,
    "x" * 100: "x" * 63,
}


@pytest.mark.parametrize(("name", "slug"), EXAMPLES.items())
def test_the_reference_rule_gives_the_documented_examples(name: str, slug: str):
    assert slugify(name) == slug


def test_docs_state_the_same_examples():
    text = DOCS.read_text()
    for name, slug in EXAMPLES.items():
        if len(name) > 40:
            continue
        assert f"| `{name}` | `{slug}` |" in text, name


@pytest.fixture(scope="module")
def probe_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart plus one template that applies its slug helper to a list of names."""
    chart = tmp_path_factory.mktemp("probe") / "proxima-agent"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-slug-probe.yaml").write_text(
        "{{- $slugs := list }}\n"
        "{{- range .Values.global.slugProbe }}\n"
        '{{- $slugs = append $slugs (include "proxima-agent.slugify" .) }}\n'
        "{{- end }}\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: slug-probe\n"
        "data:\n  slugs: {{ toJson $slugs | quote }}\n"
    )
    return chart


def _random_names(count: int) -> list[str]:
    rng = random.Random(20260920)
    alphabet = (
        "abcxyzABCXYZ0189"
        + "-----"
        + "_. /:@()"
        + "\t"
        # Accented, dotted and dotless i, Kelvin sign, ligature, Cyrillic, CJK, emoji, combining.
        + "\u00e9\u00c9\u00df\u0130\u0131\u212a\ufb01\u0416\u0436\u4e2d\U0001f680\u0301"
    )
    names = []
    for _ in range(count):
        length = rng.choice([0, 1, 2, 5, 20, 62, 63, 64, 65, 80, 130])
        names.append("".join(rng.choice(alphabet) for _ in range(length)))
    return names


def test_the_charts_slug_helper_agrees_with_the_documented_rule_on_many_names(
    helm: Helm, probe_chart: Path, tmp_path: Path
):
    names = [*EXAMPLES, *_random_names(600)]
    # JSON is YAML that every parser reads alike (helm's YAML 1.1 reads a bare y as true).
    values = tmp_path / "probe.json"
    values.write_text(json.dumps({"global": {"slugProbe": names}}, ensure_ascii=False))
    rendering = helm.template(
        [values],
        {
            "backendUrl": "https://api-console.prxm.uz",
            "installToken.value": "t",
            "clusterAgent.clusterName": "x",
        },
        chart=probe_chart,
    )
    slugs = json.loads(rendering.get("ConfigMap", "slug-probe")["data"]["slugs"])
    assert len(slugs) == len(names)
    mismatches = [(n, s, slugify(n)) for n, s in zip(names, slugs, strict=True) if s != slugify(n)]
    assert mismatches == []
    assert all(len(s) <= 63 for s in slugs)


@pytest.mark.parametrize("name", ["My Cluster (prod)", "x" * 70 + " tail", "Ташкент prod"])
def test_an_empty_slug_is_derived_from_the_cluster_name_and_passed_to_both_agents(
    helm: Helm, ci_values, name: str
):
    rendering = helm.template(
        [ci_values["quick-start"]], set_strings={"clusterAgent.clusterName": name}
    )
    for workload in (rendering.daemonset, rendering.statefulset):
        variables = env(workload)
        assert variables["PROXIMA_CLUSTER_NAME"] == name
        assert variables["PROXIMA_CLUSTER_SLUG"] == slugify(name)


def test_a_set_slug_is_used_as_is(helm: Helm, ci_values):
    rendering = helm.template(
        [ci_values["quick-start"]],
        {"clusterAgent.clusterName": "Whatever Name", "clusterAgent.clusterSlug": "prod-eu-1"},
    )
    assert env(rendering.statefulset)["PROXIMA_CLUSTER_SLUG"] == "prod-eu-1"
    assert env(rendering.daemonset)["PROXIMA_CLUSTER_SLUG"] == "prod-eu-1"


def test_notes_show_the_derived_slug_so_the_operator_can_record_it(helm: Helm, ci_values):
    notes = helm.notes(
        [ci_values["quick-start"]], {"clusterAgent.clusterName": "My Cluster (prod)"}
    )
    assert "Cluster slug: my-cluster-prod (derived from clusterAgent.clusterName)" in notes
    assert "--set clusterAgent.clusterSlug=my-cluster-prod" in notes


def test_notes_show_a_set_slug(helm: Helm, ci_values):
    notes = helm.notes([ci_values["host-agent-coexistence"]])
    assert "Cluster slug: production-rke2 (set by clusterAgent.clusterSlug)" in notes
