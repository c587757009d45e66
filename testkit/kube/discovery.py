"""Discovery documents (/api, /api/v1, /apis, /apis/{group}, /apis/{group}/{version}, /version)
for the resource types currently visible (a hidden CRD disappears from all of them)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from testkit.kube.resources import ResourceType, groups

_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"]}


def server_version(git_version: str) -> dict[str, Any]:
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_version(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_group(group: str, versions: list[str]) -> dict[str, Any]:
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_group_version(group, v) for v in versions],
        "preferredVersion": _group_version(group, versions[0]),
    }


def api_group_list(visible: Iterable[ResourceType]) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {k: v for k, v in api_group(g, vs).items() if k not in ("kind", "apiVersion")}
            for g, vs in groups(visible).items()
        ],
    }


def api_resource_list(group: str, version: str, visible: Iterable[ResourceType]) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for rt in visible:
        if rt.group != group or rt.version != version:
            continue
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        for sub in rt.subresources:
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
                }
            )
    body: dict[str, Any] = {
        "kind": "APIResourceList",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
    if group:
        body["apiVersion"] = "v1"
    return body
