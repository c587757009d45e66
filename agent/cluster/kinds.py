"""What the cluster collector reads, and what it keeps of each object.

:data:`KINDS` is the one table: the collector lists exactly these (RBAC verb ``list``), so
:data:`agent.cluster.permissions.INVENTORY_PERMISSIONS` is derived from it and the chart's
ClusterRole is tested against it. The summarizers turn an object's raw JSON (as the API server
sent it: camelCase, no client models) into the fields of a
:class:`contracts.inventory.ObjectSummary`: ``name``, ``namespace``, ``labels``, ``status`` and a
small ``detail``. They never fail on a missing field: third-party objects are often sparse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "ROLLOUTS", "Kind"]

Raw = dict[str, Any]
Summary = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """One resource the inventory lists (all namespaces at once for namespaced ones)."""

    plural: str  # the RBAC resource, and the key in the snapshot's counts and objects
    group: str  # "" for the core group
    version: str
    namespaced: bool
    summarize: Callable[[Raw], Summary]
    crd: bool = False  # may be absent from a cluster: a 404 means "not installed"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _base(raw: Raw, status: str | None, **detail: Any) -> Summary:
    meta = raw.get("metadata") or {}
    labels = meta.get("labels") or {}
    detail = {k: v for k, v in detail.items() if v is not None}
    created = meta.get("creationTimestamp")
    if created:
        detail["created"] = created
    return {
        "name": meta.get("name") or "",
        "namespace": meta.get("namespace"),
        "labels": {str(k): str(v) for k, v in labels.items()},
        "status": status,
        "detail": detail,
    }


def _owner(raw: Raw) -> str | None:
    for ref in _get(raw, "metadata", "ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    refs = _get(raw, "metadata", "ownerReferences") or []
    return f"{refs[0].get('kind')}/{refs[0].get('name')}" if refs else None


def _images(raw: Raw) -> list[str]:
    containers = _get(raw, "spec", "template", "spec", "containers") or []
    return [str(c.get("image")) for c in containers if c.get("image")]


def _condition(raw: Raw, kind: str) -> str | None:
    for condition in _get(raw, "status", "conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def _node(raw: Raw) -> Summary:
    ready = _condition(raw, "Ready")
    status = {"True": "Ready", "False": "NotReady"}.get(ready or "", "Unknown")
    if _get(raw, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    labels = _get(raw, "metadata", "labels") or {}
    roles = sorted(
        key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/")
    )
    info = _get(raw, "status", "nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in _get(raw, "status", "addresses") or []}
    return _base(
        raw,
        status,
        roles=roles,
        internal_ip=addresses.get("InternalIP"),
        kubelet_version=info.get("kubeletVersion"),
        os_image=info.get("osImage"),
        kernel_version=info.get("kernelVersion"),
        container_runtime=info.get("containerRuntimeVersion"),
        architecture=info.get("architecture"),
        machine_id=info.get("machineID"),
        system_uuid=info.get("systemUUID"),
        capacity=_get(raw, "status", "capacity"),
        allocatable=_get(raw, "status", "allocatable"),
        taints=len(_get(raw, "spec", "taints") or []),
    )


def _namespace(raw: Raw) -> Summary:
    return _base(raw, _get(raw, "status", "phase"))


def _pod_status(raw: Raw) -> str | None:
    """Like kubectl's STATUS column: a waiting or terminated reason beats the phase."""
    if _get(raw, "metadata", "deletionTimestamp"):
        return "Terminating"
    phase = _get(raw, "status", "phase")
    for container in _get(raw, "status", "containerStatuses") or []:
        state = container.get("state") or {}
        reason = _get(state, "waiting", "reason") or _get(state, "terminated", "reason")
        if reason and reason not in ("Completed",) and phase != "Succeeded":
            return str(reason)
    return str(phase) if phase else None


def _pod(raw: Raw) -> Summary:
    statuses = _get(raw, "status", "containerStatuses") or []
    containers = _get(raw, "spec", "containers") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    return _base(
        raw,
        _pod_status(raw),
        node=_get(raw, "spec", "nodeName"),
        ready=f"{ready}/{len(containers)}",
        restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
        owner=_owner(raw),
        pod_ip=_get(raw, "status", "podIP"),
    )


def _replicas(raw: Raw, *fields: str) -> dict[str, int]:
    status = raw.get("status") or {}
    return {field: int(status.get(field) or 0) for field in fields}


def _deployment(raw: Raw) -> Summary:
    desired = int(_get(raw, "spec", "replicas") if _get(raw, "spec", "replicas") is not None else 1)
    counts = _replicas(raw, "readyReplicas", "updatedReplicas", "availableReplicas")
    if _get(raw, "spec", "paused"):
        status = "Paused"
    elif counts["availableReplicas"] >= desired and counts["updatedReplicas"] >= desired:
        status = "Available"
    elif _condition(raw, "Progressing") == "False":
        status = "Failed"
    else:
        status = "Progressing"
    return _base(
        raw,
        status,
        replicas=desired,
        ready=counts["readyReplicas"],
        updated=counts["updatedReplicas"],
        available=counts["availableReplicas"],
        images=_images(raw),
    )


def _statefulset(raw: Raw) -> Summary:
    desired = int(_get(raw, "spec", "replicas") if _get(raw, "spec", "replicas") is not None else 1)
    counts = _replicas(raw, "readyReplicas", "currentReplicas", "updatedReplicas")
    status = "Ready" if counts["readyReplicas"] >= desired else "Progressing"
    return _base(
        raw,
        status,
        replicas=desired,
        ready=counts["readyReplicas"],
        current=counts["currentReplicas"],
        updated=counts["updatedReplicas"],
        images=_images(raw),
    )


def _daemonset(raw: Raw) -> Summary:
    counts = _replicas(
        raw,
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberReady",
        "updatedNumberScheduled",
        "numberAvailable",
    )
    status = "Ready" if counts["numberReady"] >= counts["desiredNumberScheduled"] else "Progressing"
    return _base(
        raw,
        status,
        desired=counts["desiredNumberScheduled"],
        current=counts["currentNumberScheduled"],
        ready=counts["numberReady"],
        updated=counts["updatedNumberScheduled"],
        available=counts["numberAvailable"],
        images=_images(raw),
    )


def _service(raw: Raw) -> Summary:
    ports = [
        f"{p.get('port')}/{p.get('protocol') or 'TCP'}" for p in _get(raw, "spec", "ports") or []
    ]
    ingress = _get(raw, "status", "loadBalancer", "ingress") or []
    external = [
        i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")
    ]
    return _base(
        raw,
        _get(raw, "spec", "type") or "ClusterIP",
        cluster_ip=_get(raw, "spec", "clusterIP"),
        ports=ports,
        external=external or None,
    )


def _job(raw: Raw) -> Summary:
    if _condition(raw, "Complete") == "True":
        status = "Complete"
    elif _condition(raw, "Failed") == "True":
        status = "Failed"
    elif _get(raw, "spec", "suspend"):
        status = "Suspended"
    else:
        status = "Running"
    counts = _replicas(raw, "active", "succeeded", "failed")
    return _base(
        raw,
        status,
        owner=_owner(raw),
        start_time=_get(raw, "status", "startTime"),
        completion_time=_get(raw, "status", "completionTime"),
        **counts,
    )


def _cronjob(raw: Raw) -> Summary:
    active = len(_get(raw, "status", "active") or [])
    if _get(raw, "spec", "suspend"):
        status = "Suspended"
    else:
        status = "Active" if active else "Scheduled"
    return _base(
        raw,
        status,
        schedule=_get(raw, "spec", "schedule"),
        active=active,
        last_schedule_time=_get(raw, "status", "lastScheduleTime"),
        last_successful_time=_get(raw, "status", "lastSuccessfulTime"),
    )


def _rollout(raw: Raw) -> Summary:
    strategy = _get(raw, "spec", "strategy") or {}
    counts = _replicas(raw, "readyReplicas", "updatedReplicas", "availableReplicas")
    return _base(
        raw,
        _get(raw, "status", "phase") or ("Paused" if _get(raw, "spec", "paused") else None),
        replicas=_get(raw, "spec", "replicas"),
        ready=counts["readyReplicas"],
        updated=counts["updatedReplicas"],
        available=counts["availableReplicas"],
        strategy=next(iter(strategy), None),
        current_step_index=_get(raw, "status", "currentStepIndex"),
        images=_images(raw),
    )


ROLLOUTS = Kind("rollouts", "argoproj.io", "v1alpha1", True, _rollout, crd=True)

KINDS: tuple[Kind, ...] = (
    Kind("nodes", "", "v1", False, _node),
    Kind("namespaces", "", "v1", False, _namespace),
    Kind("pods", "", "v1", True, _pod),
    Kind("deployments", "apps", "v1", True, _deployment),
    Kind("statefulsets", "apps", "v1", True, _statefulset),
    Kind("daemonsets", "apps", "v1", True, _daemonset),
    Kind("services", "", "v1", True, _service),
    Kind("jobs", "batch", "v1", True, _job),
    Kind("cronjobs", "batch", "v1", True, _cronjob),
    ROLLOUTS,
)
