"""The live node-agent DaemonSet and the cluster's nodes, read as the Kubernetes API returns
them (camelCase dicts): where the data volume lives on the host, which host identity files the
pods can read, and which nodes the DaemonSet runs on."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_DATA_DIR",
    "ClusterFacts",
    "cluster_facts",
    "data_host_path",
    "readable_host_identity",
    "runs_on",
    "shared_data_dir",
]

DEFAULT_DATA_DIR = "/var/lib/proxima-agent"
"""The host agent's data directory (and the chart's default hostDataDir)."""
DATA_VOLUME = "data"
NODE_AGENT_CONTAINER = "node-agent"
# The host files the agent reads its identity signals from (agent/signals.py).
HOST_IDENTITY_FILES = {
    "machine-id": "/etc/machine-id",
    "dmi": "/sys/class/dmi/id/product_uuid",
}
# The DaemonSet controller adds tolerations for these to every pod it creates.
DAEMONSET_TOLERATED_TAINTS = "node.kubernetes.io/"


@dataclass(frozen=True)
class ClusterFacts:
    daemonset: str
    """``namespace/name`` of the node-agent DaemonSet."""
    data_path: str | None
    host_identity: tuple[str, ...]
    nodes: tuple[str, ...]
    """Nodes the DaemonSet runs on."""
    skipped: tuple[str, ...] = ()
    """Nodes it does not run on (nodeSelector, taints): not part of the migration."""


def cluster_facts(ds: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> ClusterFacts:
    """What the migration needs to know of the DaemonSet ``ds`` on a cluster of ``nodes``."""
    names = sorted(str(n["metadata"]["name"]) for n in nodes)
    running = {str(n["metadata"]["name"]) for n in nodes if runs_on(n, ds)}
    return ClusterFacts(
        daemonset=f"{ds['metadata']['namespace']}/{ds['metadata']['name']}",
        data_path=data_host_path(ds),
        host_identity=readable_host_identity(ds),
        nodes=tuple(n for n in names if n in running),
        skipped=tuple(n for n in names if n not in running),
    )


def shared_data_dir(
    data_path: str | None, host_agent_nodes: Iterable[str]
) -> tuple[str, ...] | None:
    """The chart page's hostPath check, the one rule the migration's verification and the audit
    share: ``None`` when a DaemonSet's data hostPath is not the host agent's directory;
    otherwise the nodes (of ``host_agent_nodes``, sorted) where a host agent runs alongside it —
    two agents on one ``state.json``."""
    if data_path is None or posixpath.normpath(data_path) != DEFAULT_DATA_DIR:
        return None
    return tuple(sorted(set(host_agent_nodes)))


def _pod_spec(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    return ds.get("spec", {}).get("template", {}).get("spec", {}) or {}


def _container(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = _pod_spec(ds).get("containers") or [{}]
    for c in containers:
        if c.get("name") == NODE_AGENT_CONTAINER:
            return dict(c)
    return dict(containers[0])


def data_host_path(ds: Mapping[str, Any]) -> str | None:
    """The host side of the ``data`` volume (what the chart page's kubectl jsonpath prints)."""
    for volume in _pod_spec(ds).get("volumes") or []:
        if volume.get("name") == DATA_VOLUME and volume.get("hostPath"):
            return str(volume["hostPath"]["path"])
    return None


def _host_file(path: str, mounts: Sequence[tuple[str, str | None]]) -> str | None:
    """The host file a path inside the container is, through the longest mount covering it;
    ``None`` when no hostPath volume covers it (the image's own file, or an emptyDir)."""
    best: tuple[str, str | None] | None = None
    for mount_path, host in mounts:
        prefix = mount_path.rstrip("/") or "/"
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, host)
    if best is None or best[1] is None:
        return None
    rest = path[len(best[0]) :].lstrip("/")
    return posixpath.normpath(posixpath.join(best[1], rest)) if rest else best[1]


def _mounts(ds: Mapping[str, Any], container: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The container's mounts as (mount path, host path or ``None`` when not a hostPath)."""
    volumes = {v.get("name"): v for v in _pod_spec(ds).get("volumes") or []}
    mounts: list[tuple[str, str | None]] = []
    for m in container.get("volumeMounts") or []:
        host_path = (volumes.get(m.get("name")) or {}).get("hostPath")
        host = None
        if host_path:
            host = str(host_path["path"])
            if m.get("subPath"):
                host = posixpath.join(host, m["subPath"])
        mounts.append((str(m.get("mountPath")), host))
    return mounts


def readable_host_identity(ds: Mapping[str, Any]) -> tuple[str, ...]:
    """Which host identity signals the DaemonSet's pods read (``machine-id``, ``dmi``): the
    files the agent opens under ``PROXIMA_HOST_ROOT`` (and ``PROXIMA_HOST_SYS``), followed
    through the container's mounts to a hostPath volume that is the host's own file."""
    container = _container(ds)
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    root = str(env.get("PROXIMA_HOST_ROOT") or "/")
    host_sys = env.get("PROXIMA_HOST_SYS")
    mounts = _mounts(ds, container)
    candidates = {
        "machine-id": [posixpath.join(root, "etc/machine-id")],
        "dmi": [posixpath.join(root, "sys/class/dmi/id/product_uuid")],
    }
    if host_sys:
        candidates["dmi"].append(posixpath.join(str(host_sys), "class/dmi/id/product_uuid"))
    return tuple(
        signal
        for signal, paths in candidates.items()
        if any(_host_file(p, mounts) == HOST_IDENTITY_FILES[signal] for p in paths)
    )


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def runs_on(node: Mapping[str, Any], ds: Mapping[str, Any]) -> bool:
    """Whether the DaemonSet schedules a pod on ``node``: its nodeSelector and the node's
    NoSchedule/NoExecute taints against its tolerations (node affinity is not evaluated)."""
    spec = _pod_spec(ds)
    labels = node.get("metadata", {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    tolerations = spec.get("tolerations") or []
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if str(taint.get("key", "")).startswith(DAEMONSET_TOLERATED_TAINTS):
            continue
        if not _tolerates(tolerations, taint):
            return False
    return True
