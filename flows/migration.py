"""``hostdatadir-migration``: move the node agent's ``hostDataDir`` on a live cluster.

The seed's "Changing hostDataDir on a live cluster is not always safe", automated. Dry-run by
default. See ``docs/hostdatadir-migration.md``.

1. **Plan** (pure, :func:`fleet_policy.plan_hostdatadir_migration`): every node the DaemonSet
   runs on, the Console records under its name, whether a host agent runs there and whether the
   DaemonSet's pods can read the host identity (read from the live DaemonSet's mounts). Each node
   is classed (host agent present / re-bind possible / needs release, with the reason / fresh);
   the plan is a table artifact. A dry run stops here.
2. **Apply**: ``helm upgrade --install … --reuse-values --set nodeAgent.hostDataDir=<new>``
   (:mod:`flows.helm`: the real binary, or render-apply where helm cannot install); then one task
   waits for every node's pod to come back on the new directory, releases the old record of each
   node that cannot re-bind once it has been quiet past the window, and confirms the pod
   re-binds to the same record id. A progress artifact moves as nodes finish.
3. **Verify**: every node has exactly one live ``k8s-node-monitor`` record, kept its record id,
   is not stuck in 409; no node shares an identity with a host agent (the seed's hostPath check
   on the live DaemonSet). A pass/fail report artifact; the flow run fails when a check fails.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from fleet_policy import (
    NODE_MONITOR_TYPE,
    AgentId,
    AgentRecord,
    MigrationNode,
    MigrationPlan,
    MigrationRow,
    NodeClass,
    NodeName,
    plan_hostdatadir_migration,
)
from flows.console_client import ConsoleApiError, ConsoleClient
from flows.helm import HelmCli, HelmRelease, HelmUpgrader, RenderApply, UpgradeResult
from flows.kube import KubeTarget, api_client
from flows.settings import FlowSettings

__all__ = [
    "ClusterFacts",
    "MigrationBlockedError",
    "MigrationFailedError",
    "NodeState",
    "Verdict",
    "data_host_path",
    "hostdatadir_migration",
    "judge",
    "migration_nodes",
    "readable_host_identity",
    "runs_on",
    "verify_migration",
]

HOST_TYPE = "host"
DEFAULT_DATA_DIR = "/var/lib/proxima-agent"
DATA_VOLUME = "data"
NODE_AGENT_CONTAINER = "node-agent"
PARAMETER = "nodeAgent.hostDataDir"
# The host files the agent reads its identity signals from (agent/signals.py).
HOST_IDENTITY_FILES = {
    "machine-id": "/etc/machine-id",
    "dmi": "/sys/class/dmi/id/product_uuid",
}
# The DaemonSet controller adds tolerations for these to every pod it creates.
DAEMONSET_TOLERATED_TAINTS = "node.kubernetes.io/"


class MigrationBlockedError(RuntimeError):
    """The plan has nodes no apply can finish (revoked record, or a second live process)."""

    def __init__(self, rows: Sequence[MigrationRow]) -> None:
        lines = "; ".join(f"{row.node}: {row.action}" for row in rows)
        super().__init__(f"{len(rows)} node(s) need an operator before the move: {lines}")
        self.rows = tuple(rows)


class MigrationFailedError(RuntimeError):
    """Verification failed after the apply; ``failed`` are the failing checks."""

    def __init__(self, failed: Sequence[Mapping[str, str]]) -> None:
        lines = "; ".join(f"{c['subject']}: {c['check']}: {c['detail']}" for c in failed)
        super().__init__(f"{len(failed)} check(s) failed: {lines}")
        self.failed = tuple(failed)


# --- the live DaemonSet, read as the API returns it (camelCase dicts) -------------------------


def _pod_spec(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    return ds.get("spec", {}).get("template", {}).get("spec", {}) or {}


def _container(ds: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = _pod_spec(ds).get("containers") or [{}]
    for c in containers:
        if c.get("name") == NODE_AGENT_CONTAINER:
            return dict(c)
    return dict(containers[0])


def data_host_path(ds: Mapping[str, Any]) -> str | None:
    """The host side of the ``data`` volume (what the seed's kubectl jsonpath prints)."""
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


def readable_host_identity(ds: Mapping[str, Any]) -> tuple[str, ...]:
    """Which host identity signals the DaemonSet's pods read (``machine-id``, ``dmi``): the
    files the agent opens under ``PROXIMA_HOST_ROOT`` (and ``PROXIMA_HOST_SYS``), followed
    through the container's mounts to a hostPath volume that is the host's own file."""
    container = _container(ds)
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    root = str(env.get("PROXIMA_HOST_ROOT") or "/")
    host_sys = env.get("PROXIMA_HOST_SYS")
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


# --- what the flow observed, turned into the policy's input -----------------------------------


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


def _record(agent: Mapping[str, Any]) -> AgentRecord:
    flags = set(agent.get("flags") or ())
    return AgentRecord(
        agent_id=AgentId(str(agent["id"])),
        agent_type=str(agent["agent_type"]),
        last_seen_age_seconds=agent.get("seconds_since_seen"),
        has_identity_evidence="no_identity_evidence" not in flags,
        revoked=agent.get("status") == "revoked",
        shared_identity="shared_identity" in flags,
    )


def _by_name(agents: Iterable[Mapping[str, Any]], agent_type: str) -> dict[str, dict[str, Any]]:
    return {str(a["name"]): dict(a) for a in agents if a.get("agent_type") == agent_type}


def migration_nodes(
    cluster: ClusterFacts, agents: Sequence[Mapping[str, Any]]
) -> list[MigrationNode]:
    """One :class:`MigrationNode` per node the DaemonSet runs on. A host agent runs there when
    the Console holds an online ``host`` record under the node's name."""
    nodes = []
    for name in cluster.nodes:
        records = tuple(_record(a) for a in agents if a.get("name") == name)
        host_running = any(
            a.get("name") == name and a.get("agent_type") == HOST_TYPE and a["status"] == "online"
            for a in agents
        )
        nodes.append(
            MigrationNode(
                name=NodeName(name),
                records=records,
                host_agent_running=host_running,
                host_identity_readable=bool(cluster.host_identity),
            )
        )
    return nodes


# --- waiting for the nodes (pure judgement, applied by the task) ------------------------------


class NodeState(StrEnum):
    WAITING = "waiting"
    CONFLICT = "conflict"
    WAITING_QUIET = "waiting_quiet"
    RELEASED = "released"
    DONE = "done"
    FAILED = "failed"
    TIMED_OUT = "timed_out"

    @property
    def final(self) -> bool:
        return self in (NodeState.DONE, NodeState.FAILED, NodeState.TIMED_OUT)


@dataclass(frozen=True)
class Verdict:
    state: NodeState
    detail: str
    release: AgentId | None = None
    """Release this record now."""
    record: str | None = None


_REBIND_REFUSED = {"no_identity_evidence", "identity_mismatch"}


def judge(
    row: MigrationRow,
    before: Mapping[str, Any] | None,
    record: Mapping[str, Any] | None,
    *,
    window: float,
    released: bool,
    require_new_instance: bool = True,
) -> Verdict:
    """Where one node stands, from its ``k8s-node-monitor`` record now and before the move.

    Done when the record holding the node's name is online with a new instance (the pod on the
    new directory) and, where the node had a record, it is that record. A node that needs
    release — by plan, or because its re-bind was refused (``no_identity_evidence``,
    ``identity_mismatch``) — is released once the record has been quiet past ``window``."""
    if record is None:
        return Verdict(NodeState.WAITING, f"no {NODE_MONITOR_TYPE} record yet")
    rid = str(record["id"])
    if row.agent_id and rid != row.agent_id:
        return Verdict(
            NodeState.FAILED, f"the name is held by {rid}, not by {row.agent_id}", record=rid
        )
    status = record.get("status")
    instance = record.get("instance_id")
    fresh = not require_new_instance or instance != (before or {}).get("instance_id")
    if status == "online" and instance and fresh:
        if row.agent_id is None:
            how = f"enrolled as {rid}"
        elif released:
            how = f"released and re-bound to {rid}"
        else:
            how = f"re-bound to {rid}"
        return Verdict(NodeState.DONE, how, record=rid)
    if status == "revoked":
        return Verdict(NodeState.FAILED, f"{rid} was revoked during the move", record=rid)
    conflict = record.get("conflict") or {}
    count_before = ((before or {}).get("conflict") or {}).get("count") or 0
    reason = None
    if "enrollment_conflict" in (record.get("flags") or ()) and (conflict.get("count") or 0) > (
        count_before
    ):
        reason = str(conflict.get("reason"))
    must_release = row.node_class is NodeClass.NEEDS_RELEASE or (
        row.node_class is NodeClass.REBIND_POSSIBLE and reason in _REBIND_REFUSED
    )
    if status == "released" or released:
        return Verdict(
            NodeState.RELEASED, f"{rid} released; waiting for the pod to re-bind", record=rid
        )
    if must_release:
        since = record.get("seconds_since_seen")
        if since is None or since > window:
            return Verdict(
                NodeState.WAITING_QUIET,
                f"{rid} quiet past the {window:g} s window: releasing",
                release=AgentId(rid),
                record=rid,
            )
        why = f"409 {reason}: " if reason else ""
        return Verdict(
            NodeState.WAITING_QUIET,
            f"{why}waiting until {rid} has been quiet for {window:g} s",
            record=rid,
        )
    if reason:
        then = "re-binds once it is quiet" if reason == "name_in_use" else "waiting"
        return Verdict(
            NodeState.CONFLICT,
            f"409 {reason}: {then}",
            record=rid,
        )
    return Verdict(
        NodeState.WAITING, f"waiting for the pod on the new directory ({rid} {status})", record=rid
    )


# --- verification (pure) ----------------------------------------------------------------------


def verify_migration(
    plan: MigrationPlan,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    data_path: str | None,
    new_dir: str,
    daemonset: str,
) -> list[dict[str, str]]:
    """The checks of step 3, one row each: ``check``, ``subject``, ``result``, ``detail``."""
    checks: list[dict[str, str]] = []

    def check(name: str, subject: str, ok: bool, detail: str) -> None:
        checks.append(
            {
                "check": name,
                "subject": subject,
                "result": "pass" if ok else "fail",
                "detail": detail,
            }
        )

    check(
        "hostDataDir applied",
        daemonset,
        data_path == new_dir,
        f"data volume hostPath is {data_path}",
    )
    host_nodes = [row.node for row in plan.rows if row.host_agent_running]
    shared = data_path is not None and posixpath.normpath(data_path) == DEFAULT_DATA_DIR
    check(
        "no shared data directory",
        daemonset,
        not (shared and host_nodes),
        (
            f"hostPath {data_path} is the host agent's directory on {', '.join(host_nodes)}"
            if shared and host_nodes
            else f"hostPath {data_path}"
            + (" (no host agents)" if not host_nodes else f" ≠ {DEFAULT_DATA_DIR}")
        ),
    )
    hosts_before = _by_name(before, HOST_TYPE)
    hosts_after = _by_name(after, HOST_TYPE)
    for row in plan.rows:
        node = str(row.node)
        monitors = [
            a for a in after if a.get("agent_type") == NODE_MONITOR_TYPE and a.get("name") == node
        ]
        live = [a for a in monitors if a.get("status") == "online"]
        ids = ", ".join(f"{a['id']} {a.get('status')}" for a in monitors) or "none"
        check(
            f"one live {NODE_MONITOR_TYPE} record",
            node,
            len(monitors) == 1 and len(live) == 1,
            ids,
        )
        if row.agent_id is not None:
            kept = bool(monitors) and monitors[0]["id"] == row.agent_id
            check("kept its record", node, kept, f"expected {row.agent_id}, found {ids}")
        stuck = [a for a in monitors if "enrollment_conflict" in (a.get("flags") or ())]
        check(
            "not stuck in 409",
            node,
            not stuck,
            "; ".join(f"{a['id']}: 409 {(a.get('conflict') or {}).get('reason')}" for a in stuck)
            or "no enrollment conflict",
        )
        if row.host_agent_running:
            host_then = hosts_before.get(node)
            host_now = hosts_after.get(node)
            same = (
                host_then is not None
                and host_now is not None
                and host_now["id"] == host_then["id"]
                and host_now.get("status") == "online"
            )
            flagged = [
                a["id"]
                for a in [*monitors, *([host_now] if host_now else [])]
                if "shared_identity" in (a.get("flags") or ())
            ]
            separate = not (host_now and any(m["id"] == host_now["id"] for m in monitors))
            check(
                "host agent keeps its own identity",
                node,
                same and not flagged and separate,
                (
                    f"host {host_now['id'] if host_now else 'missing'} "
                    f"{host_now.get('status') if host_now else ''}".strip()
                    + (f"; shared identity flagged on {', '.join(flagged)}" if flagged else "")
                ),
            )
    return checks


# --- tasks --------------------------------------------------------------------------------------


def _serialize(api: Any, obj: Any) -> dict[str, Any]:
    data: dict[str, Any] = api.sanitize_for_serialization(obj)
    return data


@task(name="read-cluster", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def read_cluster(
    target: KubeTarget, namespace: str, release: str, daemonset: str | None
) -> ClusterFacts:
    from kubernetes import client

    api = api_client(target)
    apps: Any = client.AppsV1Api(api)
    if daemonset:
        found = [apps.read_namespaced_daemon_set(daemonset, namespace)]
    else:
        selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=node-agent"
        found = apps.list_namespaced_daemon_set(namespace, label_selector=selector).items
        if len(found) != 1:
            names = [d.metadata.name for d in found]
            raise LookupError(
                f"expected one node-agent DaemonSet of release {release!r} in {namespace}, "
                f"found {names or 'none'}: pass daemonset="
            )
    ds = _serialize(api, found[0])
    core: Any = client.CoreV1Api(api)
    nodes = [_serialize(api, n) for n in core.list_node().items]
    names = sorted(str(n["metadata"]["name"]) for n in nodes)
    running = {str(n["metadata"]["name"]) for n in nodes if runs_on(n, ds)}
    return ClusterFacts(
        daemonset=f"{ds['metadata']['namespace']}/{ds['metadata']['name']}",
        data_path=data_host_path(ds),
        host_identity=readable_host_identity(ds),
        nodes=tuple(n for n in names if n in running),
        skipped=tuple(n for n in names if n not in running),
    )


@task(name="read-console-records", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def read_records() -> list[dict[str, Any]]:
    """The host and node-monitor records of the token's environment."""
    with ConsoleClient(FlowSettings()) as console:
        return [
            *console.agents(agent_type=HOST_TYPE),
            *console.agents(agent_type=NODE_MONITOR_TYPE),
        ]


@task(name="helm-upgrade", cache_policy=NO_CACHE)
def helm_upgrade(
    mode: str,
    release: HelmRelease,
    new_dir: str,
    helm_binary: str,
    values_files: list[str],
    target: KubeTarget,
) -> UpgradeResult:
    upgrader: HelmUpgrader
    if mode == "render-apply":
        upgrader = RenderApply(
            api=api_client(target), values_files=tuple(values_files), binary=helm_binary
        )
    else:
        upgrader = HelmCli(binary=helm_binary)
    result = upgrader.upgrade(release, {PARAMETER: new_dir})
    get_run_logger().info(
        "%s: %s%s",
        result.mode,
        " ".join(result.command[1:]),
        f" → {', '.join(result.applied)}" if result.applied else "",
    )
    return result


def _progress_text(states: Mapping[str, Verdict], total: int) -> str:
    done = sum(1 for v in states.values() if v.state is NodeState.DONE)
    waiting = [f"{n} ({v.detail})" for n, v in sorted(states.items()) if not v.state.final]
    failed = [f"{n} ({v.detail})" for n, v in sorted(states.items()) if v.state is NodeState.FAILED]
    text = f"{done}/{total} nodes back"
    if failed:
        text += "; failed: " + "; ".join(failed)
    if waiting:
        text += "; waiting: " + "; ".join(waiting)
    return text[:2000]


@task(name="wait-for-nodes", cache_policy=NO_CACHE)
def wait_for_nodes(
    rows: list[MigrationRow],
    before: dict[str, dict[str, Any]],
    window: float,
    timeout_seconds: float,
    poll_seconds: float,
    require_new_instance: bool,
) -> list[dict[str, str]]:
    """One loop for every node (never a task per node): read the node-monitor records, judge
    each node, release the records that need it, move the progress artifact as nodes finish.

    Gives up on the nodes still waiting once ``timeout_seconds`` pass with no node finishing:
    the DaemonSet rolls node by node, so a deadline for the whole cluster would depend on its
    size."""
    log = get_run_logger()
    progress = create_progress_artifact(
        0.0, key="hostdatadir-migration-progress", description="waiting for the nodes"
    )
    assert isinstance(progress, UUID)  # sync context: the id, not a coroutine
    by_node = {str(row.node): row for row in rows}
    states: dict[str, Verdict] = {}
    released: set[str] = set()
    last_progress = time.monotonic()
    with ConsoleClient(FlowSettings()) as console:
        while True:
            records = _by_name(console.agents(agent_type=NODE_MONITOR_TYPE), NODE_MONITOR_TYPE)
            changed = False
            for node, row in by_node.items():
                if node in states and states[node].state.final:
                    continue
                verdict = judge(
                    row,
                    before.get(node),
                    records.get(node),
                    window=window,
                    released=node in released,
                    require_new_instance=require_new_instance,
                )
                if verdict.release is not None:
                    try:
                        console.release_identity(verdict.release)
                        released.add(node)
                        verdict = Verdict(
                            NodeState.RELEASED,
                            f"released {verdict.release}; waiting for the pod to re-bind",
                            record=verdict.record,
                        )
                    except ConsoleApiError as exc:
                        state = (
                            NodeState.WAITING_QUIET
                            if exc.reason == "agent_recently_seen"
                            else NodeState.FAILED
                        )
                        verdict = Verdict(
                            state, f"release: {exc.reason}: {exc.message}", record=verdict.record
                        )
                previous = states.get(node)
                if previous != verdict:
                    log.info("%s: %s", node, verdict.detail)
                    changed = changed or previous is None or previous.state != verdict.state
                    states[node] = verdict
                    if verdict.state.final:
                        last_progress = time.monotonic()
            finished = sum(1 for v in states.values() if v.state.final)
            if changed:
                update_progress_artifact(
                    progress,
                    100.0 * finished / max(len(by_node), 1),
                    description=_progress_text(states, len(by_node)),
                )
            if finished == len(by_node):
                break
            if time.monotonic() - last_progress > timeout_seconds:
                for node, v in states.items():
                    if not v.state.final:
                        states[node] = Verdict(
                            NodeState.TIMED_OUT,
                            f"no node finished for {timeout_seconds:g} s; last: {v.detail}",
                            record=v.record,
                        )
                update_progress_artifact(
                    progress,
                    100.0 * finished / max(len(by_node), 1),
                    description=_progress_text(states, len(by_node)),
                )
                break
            time.sleep(poll_seconds)
    return [
        {
            "node": node,
            "class": by_node[node].node_class.value,
            "outcome": states[node].state.value,
            "record": states[node].record or "-",
            "detail": states[node].detail,
        }
        for node in sorted(by_node)
    ]


def _plan_description(
    cluster: ClusterFacts, new_dir: str, plan: MigrationPlan, dry_run: bool
) -> str:
    counts = ", ".join(f"{c.value} {n}" for c, n in plan.count_by_class().items() if n)
    identity = ", ".join(cluster.host_identity) or "none"
    text = (
        f"{'Dry run' if dry_run else 'Apply'}: {cluster.daemonset} data hostPath "
        f"{cluster.data_path} → {new_dir}; host identity readable by the pods: {identity}; "
        f"{counts or 'no nodes'}"
    )
    if cluster.skipped:
        text += f"; not run on by the DaemonSet (left out): {', '.join(cluster.skipped)}"
    if cluster.data_path == new_dir:
        text += "; already on the new directory: an apply waits for the nodes and verifies"
    hosts = [str(row.node) for row in plan.rows if row.host_agent_running]
    if new_dir == DEFAULT_DATA_DIR and hosts:
        text += f"; {new_dir} is the host agents' directory: an apply refuses"
    if plan.blocked:
        text += f"; blocked (an apply refuses): {', '.join(str(r.node) for r in plan.blocked)}"
    return text


@flow(name="hostdatadir-migration")
def hostdatadir_migration(
    new_host_data_dir: str = "/var/lib/proxima-node-agent",
    dry_run: bool = True,
    release: str = "proxima-agent",
    chart: str = "proxima/proxima-agent",
    namespace: str = "proxima-system",
    daemonset: str | None = None,
    helm_mode: Literal["helm", "render-apply"] = "helm",
    helm_binary: str = "helm",
    values_files: list[str] | None = None,
    kubeconfig: str | None = None,
    kube_context: str | None = None,
    quiet_window_seconds: float = 300,
    timeout_seconds: float = 900,
    poll_seconds: float = 5,
) -> dict[str, Any]:
    """Move the node agent's hostDataDir (dry-run by default: the plan only).

    ``helm_mode``: ``helm`` runs ``helm upgrade --install … --reuse-values --set
    nodeAgent.hostDataDir=…``; ``render-apply`` renders it with ``helm template`` from
    ``values_files`` (the release's values) and writes the DaemonSet through the Kubernetes API.
    ``quiet_window_seconds`` is the Console's PROXIMA_IDENTITY_QUIET_SECONDS (a shorter one only
    makes releases retry). ``timeout_seconds``: give up on the nodes still waiting once no node
    has finished for this long."""
    log = get_run_logger()
    new_dir = posixpath.normpath(new_host_data_dir)
    if not new_dir.startswith("/"):
        raise ValueError(f"new_host_data_dir must be an absolute path, got {new_host_data_dir!r}")
    target = KubeTarget(kubeconfig=kubeconfig, context=kube_context)
    cluster = read_cluster(target, namespace, release, daemonset)
    before = read_records()
    plan = plan_hostdatadir_migration(
        migration_nodes(cluster, before), quiet_window_seconds=quiet_window_seconds
    )
    description = _plan_description(cluster, new_dir, plan, dry_run)
    create_table_artifact(plan.table(), key="hostdatadir-migration-plan", description=description)
    log.info("%s", description)
    for row in plan.rows:
        log.info("%s: %s — %s", row.node, row.node_class.value, row.action)
    result: dict[str, Any] = {
        "dry_run": dry_run,
        "daemonset": cluster.daemonset,
        "from": cluster.data_path,
        "to": new_dir,
        "plan": plan.table(),
        "classes": {str(row.node): row.node_class.value for row in plan.rows},
        "skipped_nodes": list(cluster.skipped),
    }
    if dry_run:
        return result

    moving = cluster.data_path != new_dir
    if moving and plan.blocked:
        raise MigrationBlockedError(plan.blocked)
    hosts = [str(row.node) for row in plan.rows if row.host_agent_running]
    if new_dir == DEFAULT_DATA_DIR and hosts:
        raise ValueError(
            f"{new_dir} is the host agent's data directory, and host agents run on "
            f"{', '.join(hosts)}: two agents must never share a data directory"
        )
    if moving:
        upgrade = helm_upgrade(
            helm_mode,
            HelmRelease(
                release=release,
                chart=chart,
                namespace=namespace,
                kubeconfig=kubeconfig,
                kube_context=kube_context,
            ),
            new_dir,
            helm_binary,
            list(values_files or []),
            target,
        )
        result["upgrade"] = {"mode": upgrade.mode, "applied": list(upgrade.applied)}
    monitors_before = _by_name(before, NODE_MONITOR_TYPE)
    outcomes = wait_for_nodes(
        list(plan.rows),
        monitors_before,
        quiet_window_seconds,
        timeout_seconds,
        poll_seconds,
        moving,
    )
    create_table_artifact(
        outcomes,
        key="hostdatadir-migration-nodes",
        description=f"Nodes after moving to {new_dir}",
    )
    result["outcomes"] = outcomes

    after_cluster = read_cluster(target, namespace, release, daemonset)
    after = read_records()
    checks = verify_migration(
        plan, before, after, after_cluster.data_path, new_dir, after_cluster.daemonset
    )
    failed = [c for c in checks if c["result"] == "fail"]
    result["checks"] = checks
    result["passed"] = not failed
    create_markdown_artifact(
        _report(new_dir, outcomes, checks),
        key="hostdatadir-migration-verify",
        description="pass" if not failed else "fail",
    )
    if failed:
        raise MigrationFailedError(failed)
    log.info("hostDataDir migration to %s verified on %d nodes", new_dir, len(plan.rows))
    return result


def _report(
    new_dir: str, outcomes: Sequence[Mapping[str, str]], checks: Sequence[Mapping[str, str]]
) -> str:
    failed = [c for c in checks if c["result"] == "fail"]
    lines = [
        f"# hostDataDir migration to `{new_dir}`: {'FAIL' if failed else 'PASS'}",
        "",
        "| node | class | outcome | record | detail |",
        "|---|---|---|---|---|",
        *(
            f"| {o['node']} | {o['class']} | {o['outcome']} | {o['record']} | {o['detail']} |"
            for o in outcomes
        ),
        "",
        "| check | subject | result | detail |",
        "|---|---|---|---|",
        *(
            f"| {c['check']} | {c['subject']} | {'✅' if c['result'] == 'pass' else '❌'} "
            f"| {c['detail']} |"
            for c in checks
        ),
    ]
    return "\n".join(lines)
