"""The resource catalogue: which API groups, versions and resources the double serves.

Each `ResourceType` carries what discovery reports (`kind`, `namespaced`, `verbs`, short names,
subresources) and what the store needs to name objects in errors (`plural.group`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from testkit.kube.errors import UnknownResourceError

ALL_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" is the core group (served under /api/v1)
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The name kubectl and the API server's messages use: `pods`, `rollouts.argoproj.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The API path of the collection or of one object."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [prefix]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
        return "/".join(parts)

    def __str__(self) -> str:
        return self.qualified


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    sub: tuple[str, ...] = ("status",),
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short,
        subresources=sub,
    )


CATALOGUE: tuple[ResourceType, ...] = (
    # core/v1
    _rt("", "v1", "namespaces", "Namespace", namespaced=False, short=("ns",), sub=("status",)),
    _rt("", "v1", "nodes", "Node", namespaced=False, short=("no",)),
    _rt("", "v1", "pods", "Pod", short=("po",)),
    _rt("", "v1", "services", "Service", short=("svc",)),
    _rt("", "v1", "configmaps", "ConfigMap", short=("cm",), sub=()),
    _rt("", "v1", "secrets", "Secret", sub=()),
    _rt("", "v1", "serviceaccounts", "ServiceAccount", short=("sa",), sub=()),
    _rt("", "v1", "events", "Event", short=("ev",), sub=()),
    _rt("", "v1", "endpoints", "Endpoints", short=("ep",), sub=()),
    _rt("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",)),
    # apps/v1
    _rt("apps", "v1", "deployments", "Deployment", short=("deploy",), sub=("status",)),
    _rt("apps", "v1", "statefulsets", "StatefulSet", short=("sts",), sub=("status",)),
    _rt("apps", "v1", "daemonsets", "DaemonSet", short=("ds",)),
    _rt("apps", "v1", "replicasets", "ReplicaSet", short=("rs",), sub=("status",)),
    _rt("apps", "v1", "controllerrevisions", "ControllerRevision", sub=()),
    # batch/v1
    _rt("batch", "v1", "jobs", "Job"),
    _rt("batch", "v1", "cronjobs", "CronJob", short=("cj",)),
    # coordination.k8s.io/v1
    _rt("coordination.k8s.io", "v1", "leases", "Lease", sub=()),
    # rbac.authorization.k8s.io/v1 (so rendered charts can be applied)
    _rt("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False, sub=()),
    _rt(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        namespaced=False,
        sub=(),
    ),
    _rt("rbac.authorization.k8s.io", "v1", "roles", "Role", sub=()),
    _rt("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", sub=()),
    # policy/v1, networking.k8s.io/v1
    _rt("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short=("pdb",)),
    _rt("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short=("netpol",), sub=()),
    # argoproj.io/v1alpha1 (a CRD in a real cluster: can be hidden to look uninstalled)
    _rt("argoproj.io", "v1alpha1", "rollouts", "Rollout", short=("ro",), sub=("status",)),
)

ROLLOUTS: ResourceType = next(rt for rt in CATALOGUE if rt.plural == "rollouts")

_BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in CATALOGUE
}
_BY_KIND: dict[tuple[str, str], ResourceType] = {(rt.api_version, rt.kind): rt for rt in CATALOGUE}


def by_path(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def by_kind(api_version: str, kind: str) -> ResourceType:
    try:
        return _BY_KIND[(api_version, kind)]
    except KeyError:
        raise UnknownResourceError(f"{api_version} {kind}") from None


def find(name: str | ResourceType) -> ResourceType:
    """Look a resource up the way kubectl does: `pods`, `po`, `Pod`, `deployments.apps`."""
    if isinstance(name, ResourceType):
        return name
    plural, _, group = name.partition(".")
    lowered = plural.lower()
    matches = [
        rt
        for rt in CATALOGUE
        if lowered in (rt.plural, rt.singular, *rt.short_names) and (not group or rt.group == group)
    ]
    if len(matches) != 1:
        raise UnknownResourceError(name)
    return matches[0]


def groups(resource_types: Iterable[ResourceType]) -> dict[str, list[str]]:
    """group → versions, in catalogue order, for the named (non-core) groups."""
    result: dict[str, list[str]] = {}
    for rt in resource_types:
        if rt.group and rt.version not in result.setdefault(rt.group, []):
            result[rt.group].append(rt.version)
    return result
