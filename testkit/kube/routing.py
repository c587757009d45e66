"""Map an HTTP request onto the API server's terms: group, version, resource, namespace, verb."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from testkit.kube.resources import ResourceType, by_path


class DiscoveryPath(StrEnum):
    API = "api"  # /api
    CORE = "core"  # /api/v1
    APIS = "apis"  # /apis
    GROUP = "group"  # /apis/{group}
    GROUP_VERSION = "group-version"  # /apis/{group}/{version}


@dataclass(frozen=True)
class Discovery:
    kind: DiscoveryPath
    group: str = ""
    version: str = ""


@dataclass(frozen=True)
class Target:
    """A resource request. `rt` is None when group/version/plural is not in the catalogue."""

    verb: str
    group: str
    version: str
    plural: str
    rt: ResourceType | None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    @property
    def resource(self) -> str:
        """The RBAC resource: `pods`, or `pods/status` for a subresource."""
        return f"{self.plural}/{self.subresource}" if self.subresource else self.plural

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _verb(method: str, named: bool, watch: bool) -> str:
    method = method.upper()
    if method in ("GET", "HEAD"):
        if watch:
            return "watch"
        return "get" if named else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return method.lower()


def parse(method: str, path: str, *, watch_param: bool = False) -> Target | Discovery | None:
    """`None` for a path that is not under /api or /apis (a non-resource URL)."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        if len(parts) == 1:
            return Discovery(DiscoveryPath.API)
        group, version, rest = "", parts[1], parts[2:]
        if not rest:
            return Discovery(DiscoveryPath.CORE, "", version)
    else:
        if len(parts) == 1:
            return Discovery(DiscoveryPath.APIS)
        if len(parts) == 2:
            return Discovery(DiscoveryPath.GROUP, parts[1])
        group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            return Discovery(DiscoveryPath.GROUP_VERSION, group, version)
    watch = watch_param
    if rest[0] == "watch":  # the deprecated /watch/ prefix
        watch, rest = True, rest[1:]
    namespace = None
    namespace_subresource = not group and len(rest) == 3 and rest[2] in ("status", "finalize")
    if rest and rest[0] == "namespaces" and len(rest) >= 3 and not namespace_subresource:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return Target(_verb(method, False, watch), group, version, "/".join(rest), None)
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    return Target(
        verb=_verb(method, name is not None, watch),
        group=group,
        version=version,
        plural=plural,
        rt=by_path(group, version, plural),
        namespace=namespace,
        name=name,
        subresource=subresource,
    )
