"""What the migration tells the operator: the plan's one-line description and the final
pass/fail report (Markdown)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flows.hostdatadir.manifests import DEFAULT_DATA_DIR, ClusterFacts
from rollout_policy import MigrationPlan

__all__ = ["plan_description", "report"]


def plan_description(
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


def report(
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
