"""Every value is documented in values.yaml, typed in values.schema.json and listed in the docs.

The values tables of chart/proxima-agent/README.md and docs/chart.md are generated from the
``# --`` comments of values.yaml; ``PROXIMA_UPDATE_GOLDEN=1`` rewrites them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
import pytest
import yaml

from testkit.chart import CHART, REPO
from testkit.values_doc import document, leaf_paths, section, table, with_section

VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"
TABLES = (CHART / "README.md", REPO / "docs" / "chart.md")
UPDATE = os.environ.get("PROXIMA_UPDATE_GOLDEN") == "1"

# Every value the chart's page names, and the chart's own additions.
NAMED_VALUES = [
    "backendUrl",
    "installToken.value",
    "installToken.existingSecret.name",
    "installToken.existingSecret.key",
    "namespace",
    "commonLabels",
    "commonAnnotations",
    "imagePullSecrets",
    "nodeAgent.enabled",
    "nodeAgent.image",
    "nodeAgent.logLevel",
    "nodeAgent.metricsInterval",
    "nodeAgent.hostMetrics",
    "nodeAgent.agentType",
    "nodeAgent.hostDataDir",
    "nodeAgent.tolerations",
    "nodeAgent.resources",
    "nodeAgent.securityContext",
    "clusterAgent.enabled",
    "clusterAgent.image",
    "clusterAgent.clusterName",
    "clusterAgent.clusterSlug",
    "clusterAgent.replicas",
    "clusterAgent.syncInterval",
    "clusterAgent.heartbeatInterval",
    "clusterAgent.podLimit",
    "clusterAgent.excludeNamespaces",
    "clusterAgent.persistence.enabled",
    "clusterAgent.securityContext",
]


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load(VALUES.read_text())


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text())


def _lookup(tree: dict[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"{dotted}: no {part!r}"
        node = node[part]
    return node


@pytest.mark.parametrize("path", NAMED_VALUES)
def test_every_value_the_page_names_exists(values, path: str):
    _lookup(values, path)


def test_every_value_is_documented_with_a_helm_docs_comment():
    rows, missing = document(VALUES)
    assert missing == [], "values without a `# --` comment above them"
    assert rows, "no values documented at all"
    assert all(row.description for row in rows)


def _schema_paths(node: dict[str, Any], definitions: dict[str, Any], prefix: str = "") -> set:
    if "$ref" in node:
        node = definitions[node["$ref"].rsplit("/", 1)[-1]]
    paths = set()
    props = node.get("properties") if node.get("additionalProperties") is False else None
    if not props:
        return {prefix.rstrip(".")}
    for key, sub in props.items():
        paths |= _schema_paths(sub, definitions, f"{prefix}{key}.")
    return paths


def test_the_schema_types_exactly_the_values_yaml_holds(values, schema):
    typed = _schema_paths(schema, schema["definitions"]) - {"global"}
    held = set()
    for path in leaf_paths(values):
        # A passthrough object (resources, securityContext, …) is typed as a whole.
        whole = [t for t in typed if path.startswith(t + ".")]
        held.add(whole[0] if whole else path)
    assert held == typed


def test_the_schema_is_draft_07_and_closed_so_typos_fail(schema):
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["nodeAgent"]["additionalProperties"] is False
    assert schema["properties"]["clusterAgent"]["additionalProperties"] is False


def test_the_defaults_satisfy_the_schema(values, schema):
    jsonschema.Draft7Validator(schema).validate(values)


@pytest.mark.parametrize("doc", TABLES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_values_table_lists_every_value_as_values_yaml_documents_it(doc):
    rows, _ = document(VALUES)
    expected = table(rows)
    text = doc.read_text()
    if UPDATE:
        doc.write_text(with_section(text, expected))
        text = doc.read_text()
    assert section(text) == expected, f"{doc.name} is stale: run with PROXIMA_UPDATE_GOLDEN=1"
