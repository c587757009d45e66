"""The checks after the move (the flow's third step), from the plan, the Console's records before
and after (:class:`~contracts.views.AgentView`), and the DaemonSet's data hostPath now: one row
per check with ``check``, ``subject``, ``result`` (``pass`` / ``fail``) and ``detail``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from contracts.views import AgentView
from contracts.vocabulary import AgentFlag, AgentStatus, AgentType
from flows.hostdatadir.manifests import DEFAULT_DATA_DIR, shared_data_dir
from flows.hostdatadir.records import by_name
from rollout_policy import MigrationPlan, MigrationRow

__all__ = ["failed_checks", "verify_migration"]

Check = dict[str, str]


def _check(name: str, subject: str, ok: bool, detail: str) -> Check:
    return {"check": name, "subject": subject, "result": "pass" if ok else "fail", "detail": detail}


def failed_checks(checks: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    return [c for c in checks if c["result"] == "fail"]


def verify_migration(
    plan: MigrationPlan,
    before: Sequence[AgentView],
    after: Sequence[AgentView],
    data_path: str | None,
    new_dir: str,
    daemonset: str,
) -> list[Check]:
    """The DaemonSet's checks, then each node's (and its host agent's, where one runs)."""
    checks = _daemonset_checks(plan, data_path, new_dir, daemonset)
    hosts_before = by_name(before, AgentType.HOST)
    hosts_after = by_name(after, AgentType.HOST)
    for row in plan.rows:
        node = str(row.node)
        monitors = [
            a for a in after if a.agent_type is AgentType.K8S_NODE_MONITOR and a.name == node
        ]
        checks += _node_checks(row, monitors)
        if row.host_agent_running:
            checks.append(
                _host_check(node, monitors, hosts_before.get(node), hosts_after.get(node))
            )
    return checks


def _daemonset_checks(
    plan: MigrationPlan, data_path: str | None, new_dir: str, daemonset: str
) -> list[Check]:
    host_nodes = [str(row.node) for row in plan.rows if row.host_agent_running]
    shared = shared_data_dir(data_path, host_nodes)
    return [
        _check(
            "hostDataDir applied",
            daemonset,
            data_path == new_dir,
            f"data volume hostPath is {data_path}",
        ),
        _check(
            "no shared data directory",
            daemonset,
            not shared,
            (
                f"hostPath {data_path} is the host agent's directory on {', '.join(shared)}"
                if shared
                else f"hostPath {data_path}"
                + (" (no host agents)" if not host_nodes else f" ≠ {DEFAULT_DATA_DIR}")
            ),
        ),
    ]


def _node_checks(row: MigrationRow, monitors: Sequence[AgentView]) -> list[Check]:
    """One live node-monitor record, the one the node had (if it had one), not stuck in 409."""
    node = str(row.node)
    live = [a for a in monitors if a.status is AgentStatus.ONLINE]
    ids = ", ".join(f"{a.id} {a.status}" for a in monitors) or "none"
    checks = [
        _check(
            f"one live {AgentType.K8S_NODE_MONITOR} record",
            node,
            len(monitors) == 1 and len(live) == 1,
            ids,
        )
    ]
    if row.agent_id is not None:
        kept = bool(monitors) and monitors[0].id == row.agent_id
        checks.append(
            _check("kept its record", node, kept, f"expected {row.agent_id}, found {ids}")
        )
    stuck = [a for a in monitors if AgentFlag.ENROLLMENT_CONFLICT in a.flags]
    checks.append(
        _check(
            "not stuck in 409",
            node,
            not stuck,
            "; ".join(f"{a.id}: 409 {a.conflict.reason if a.conflict else None}" for a in stuck)
            or "no enrollment conflict",
        )
    )
    return checks


def _host_check(
    node: str,
    monitors: Sequence[AgentView],
    host_then: AgentView | None,
    host_now: AgentView | None,
) -> Check:
    """The host agent is still online on its own record, flagged by nobody as sharing an
    identity, and no node-monitor record is its record."""
    same = (
        host_then is not None
        and host_now is not None
        and host_now.id == host_then.id
        and host_now.status is AgentStatus.ONLINE
    )
    flagged = [
        a.id
        for a in [*monitors, *([host_now] if host_now else [])]
        if AgentFlag.SHARED_IDENTITY in a.flags
    ]
    separate = not (host_now and any(m.id == host_now.id for m in monitors))
    detail = f"host {host_now.id} {host_now.status}" if host_now else "host missing"
    if flagged:
        detail += f"; shared identity flagged on {', '.join(flagged)}"
    return _check(
        "host agent keeps its own identity", node, same and not flagged and separate, detail
    )
