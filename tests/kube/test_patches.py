"""The patch types, applied as the API server applies them (pure functions)."""

from __future__ import annotations

import pytest

from testkit.kube.errors import StatusError
from testkit.kube.patches import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    apply_json_patch,
    apply_merge_patch,
    apply_patch,
    apply_strategic_merge_patch,
)

POD_SPEC = {
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "a:1",
                "ports": [{"containerPort": 80}],
                "env": [{"name": "X", "value": "1"}],
            },
            {"name": "sidecar", "image": "s:1"},
        ],
        "volumes": [
            {"name": "data", "hostPath": {"path": "/var/lib/a"}},
            {"name": "tmp", "emptyDir": {}},
        ],
    },
    "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
}


def test_strategic_merge_merges_named_lists_item_by_item() -> None:
    patched = apply_strategic_merge_patch(
        POD_SPEC,
        {
            "spec": {
                "containers": [
                    {"name": "app", "image": "a:2", "env": [{"name": "Y", "value": "2"}]}
                ],
                "volumes": [
                    {"name": "data", "hostPath": {"path": "/srv/b"}},
                    {"name": "new", "emptyDir": {}},
                ],
            },
            "metadata": {"finalizers": ["b"], "labels": {"x": None}},
        },
    )
    app, sidecar = patched["spec"]["containers"]
    assert (app["image"], sidecar["image"]) == ("a:2", "s:1")
    assert app["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]
    assert app["ports"] == [{"containerPort": 80}]
    assert [v["name"] for v in patched["spec"]["volumes"]] == ["data", "tmp", "new"]
    assert patched["spec"]["volumes"][0]["hostPath"] == {"path": "/srv/b"}
    assert patched["metadata"] == {"finalizers": ["a", "b"], "labels": {}}
    assert POD_SPEC["spec"]["containers"][0]["image"] == "a:1"  # the input is untouched


def test_strategic_merge_directives_delete_and_replace() -> None:
    deleted = apply_strategic_merge_patch(
        POD_SPEC, {"spec": {"volumes": [{"name": "tmp", "$patch": "delete"}]}}
    )
    assert [v["name"] for v in deleted["spec"]["volumes"]] == ["data"]
    replaced = apply_strategic_merge_patch(
        POD_SPEC,
        {"spec": {"containers": [{"name": "only", "image": "o:1"}, {"$patch": "replace"}]}},
    )
    assert replaced["spec"]["containers"] == [{"name": "only", "image": "o:1"}]


def test_merge_patch_replaces_lists_and_removes_nulls() -> None:
    patched = apply_merge_patch(
        POD_SPEC, {"spec": {"volumes": [{"name": "only"}]}, "metadata": {"labels": None}}
    )
    assert patched["spec"]["volumes"] == [{"name": "only"}]
    assert "labels" not in patched["metadata"]


def test_json_patch_operations() -> None:
    patched = apply_json_patch(
        POD_SPEC,
        [
            {"op": "test", "path": "/spec/volumes/0/name", "value": "data"},
            {"op": "replace", "path": "/spec/volumes/0/hostPath/path", "value": "/srv/c"},
            {"op": "add", "path": "/metadata/labels/y", "value": "2"},
            {"op": "remove", "path": "/spec/containers/1"},
            {"op": "copy", "from": "/metadata/labels/y", "path": "/metadata/labels/z"},
            {"op": "move", "from": "/metadata/labels/x", "path": "/metadata/labels/w"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
        ],
    )
    assert patched["spec"]["volumes"][0]["hostPath"]["path"] == "/srv/c"
    assert [c["name"] for c in patched["spec"]["containers"]] == ["app"]
    assert patched["metadata"]["labels"] == {"y": "2", "z": "2", "w": "1"}
    assert patched["metadata"]["finalizers"] == ["a", "c"]
    with pytest.raises(StatusError) as failed:
        apply_json_patch(POD_SPEC, [{"op": "test", "path": "/metadata/labels/x", "value": "nope"}])
    assert failed.value.code == 422


def test_the_content_type_picks_the_patch_and_unknown_types_get_415() -> None:
    body = {"spec": {"volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}]}}
    assert len(apply_patch(POD_SPEC, body, STRATEGIC_MERGE_PATCH)["spec"]["volumes"]) == 2
    assert len(apply_patch(POD_SPEC, body, MERGE_PATCH + "; charset=utf-8")["spec"]["volumes"]) == 1
    assert apply_patch(POD_SPEC, [{"op": "remove", "path": "/spec"}], JSON_PATCH) == {
        "metadata": POD_SPEC["metadata"]
    }
    with pytest.raises(StatusError) as unsupported:
        apply_patch(POD_SPEC, body, "text/plain")
    assert unsupported.value.code == 415
