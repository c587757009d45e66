"""The checks after the move (step 3 of the flow), from the plan, the Console's records before
and after, and the DaemonSet's data hostPath now: one row per check with ``check``,
``subject``, ``result`` (``pass`` / ``fail``) and ``detail``."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from fleet_policy import NODE_MONITOR_TYPE, MigrationPlan, MigrationRow
from flows.hostdatadir.manifests import DEFAULT_DATA_DIR
from flows.hostdatadir.records import HOST_TYPE, by_name

__all__ = ["failed_checks", "verify_migration"]

Check = dict[str, str]


def _check(name: str, subject: str, ok: bool, detail: str) -> Check:
    return {"check": name, "subject": subject, "result": "pass" if ok else "fail", "detail": detail}


def failed_checks(checks: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    return [c for c in checks if c["result"] == "fail"]


def verify_migration(
    plan: MigrationPlan,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    data_path: str | None,
    new_dir: str,
    daemonset: str,
) -> list[Check]:
    """The DaemonSet's checks, then each node's (and its host agent's, where one runs)."""
    checks = _daemonset_checks(plan, data_path, new_dir, daemonset)
    hosts_before = by_name(before, HOST_TYPE)
    hosts_after = by_name(after, HOST_TYPE)
    for row in plan.rows:
        node = str(row.node)
        monitors = [
            a for a in after if a.get("agent_type") == NODE_MONITOR_TYPE and a.get("name") == node
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
    host_nodes = [row.node for row in plan.rows if row.host_agent_running]
    shared = data_path is not None and posixpath.normpath(data_path) == DEFAULT_DATA_DIR
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
            not (shared and host_nodes),
            (
                f"hostPath {data_path} is the host agent's directory on {', '.join(host_nodes)}"
                if shared and host_nodes
                else f"hostPath {data_path}"
                + (" (no host agents)" if not host_nodes else f" ≠ {DEFAULT_DATA_DIR}")
            ),
        ),
    ]


def _node_checks(row: MigrationRow, monitors: Sequence[Mapping[str, Any]]) -> list[Check]:
    """One live node-monitor record, the one the node had (if it had one), not stuck in 409."""
    node = str(row.node)
    live = [a for a in monitors if a.get("status") == "online"]
    ids = ", ".join(f"{a['id']} {a.get('status')}" for a in monitors) or "none"
    checks = [
        _check(
            f"one live {NODE_MONITOR_TYPE} record",
            node,
            len(monitors) == 1 and len(live) == 1,
            ids,
        )
    ]
    if row.agent_id is not None:
        kept = bool(monitors) and monitors[0]["id"] == row.agent_id
        checks.append(
            _check("kept its record", node, kept, f"expected {row.agent_id}, found {ids}")
        )
    stuck = [a for a in monitors if "enrollment_conflict" in (a.get("flags") or ())]
    checks.append(
        _check(
            "not stuck in 409",
            node,
            not stuck,
            "; ".join(f"{a['id']}: 409 {(a.get('conflict') or {}).get('reason')}" for a in stuck)
            or "no enrollment conflict",
        )
    )
    return checks


def _host_check(
    node: str,
    monitors: Sequence[Mapping[str, Any]],
    host_then: Mapping[str, Any] | None,
    host_now: Mapping[str, Any] | None,
) -> Check:
    """The host agent is still online on its own record, flagged by nobody as sharing an
    identity, and no node-monitor record is its record."""
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
    return _check(
        "host agent keeps its own identity",
        node,
        same and not flagged and separate,
        (
            f"host {host_now['id'] if host_now else 'missing'} "
            f"{host_now.get('status') if host_now else ''}".strip()
            + (f"; shared identity flagged on {', '.join(flagged)}" if flagged else "")
        ),
    )
