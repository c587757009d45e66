"""``fleet-audit``: scheduled checks of the whole fleet, stored in the Console, shown as an
artifact. Rules and their fixes: ``flows/audit_rules.py`` and ``docs/audit.md``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.context import get_run_context

from contracts.audit import AuditRunCreate, Finding
from contracts.rollouts import RolloutPublic
from contracts.views import AgentView, ClusterView
from flows.audit_rules import AuditFacts, DaemonSetFact, evaluate
from flows.console_client import ConsoleClient
from flows.kube import KubeTarget, agent_daemonsets, api_client, discover_target
from flows.settings import FlowSettings


@dataclass(frozen=True)
class ConsoleFacts:
    agents: list[AgentView]
    clusters: list[ClusterView]
    rollouts: list[RolloutPublic]
    """The 10 most recent, with their targets."""


@task(name="gather-console-facts", retries=2, retry_delay_seconds=2)
def gather_console_facts() -> ConsoleFacts:
    with ConsoleClient(FlowSettings()) as console:
        rollouts = [console.rollout(r.id) for r in console.rollouts(limit=10)]
        return ConsoleFacts(agents=console.agents(), clusters=console.clusters(), rollouts=rollouts)


@task(name="gather-kubernetes-facts", retries=2, retry_delay_seconds=2)
def gather_kubernetes_facts(target: KubeTarget, namespace: str | None) -> list[DaemonSetFact]:
    return agent_daemonsets(api_client(target), namespace)


def kubernetes_facts(
    check: bool | None, kubeconfig: str | None, namespace: str | None
) -> tuple[list[DaemonSetFact], str | None]:
    """The DaemonSet facts, and why they are missing when they are. ``check``: None checks
    whenever a cluster is configured for the worker, True requires one, False skips."""
    if check is False:
        return [], "turned off by check_kubernetes=false"
    target, where = discover_target(kubeconfig)
    if target is None:
        if check:
            raise ValueError(f"check_kubernetes=true but no cluster is configured: {where}")
        return [], where
    return gather_kubernetes_facts(target, namespace), None


@task(name="store-findings", retries=2, retry_delay_seconds=2)
def store_findings(findings: list[Finding], flow_run_id: str | None) -> str:
    with ConsoleClient(FlowSettings()) as console:
        run = console.post_audit(AuditRunCreate(flow_run_id=flow_run_id, findings=findings))
        return run.id


@flow(name="fleet-audit")
def fleet_audit(
    kubeconfig: str | None = None,
    namespace: str | None = None,
    check_kubernetes: bool | None = None,
    stuck_window_minutes: float = 15,
) -> dict[str, object]:
    """Audit the fleet: shared identities, stuck 409s, offline agents, sync-interval drift, slug
    mismatches, DaemonSets sharing the host agent's directory, revoked keys still knocking.

    ``check_kubernetes``: unset checks the DaemonSets whenever the worker can reach a cluster
    (the ``kubeconfig`` parameter, ``KUBECONFIG``, or in-cluster) and records a
    ``kubernetes_not_checked`` finding when it cannot; ``true`` fails without a cluster;
    ``false`` skips the check (and says so in the findings).

    Args:
        kubeconfig: A kubeconfig file for the DaemonSet check; unset: the worker's KUBECONFIG
            or its in-cluster ServiceAccount.
        namespace: Only this namespace's node-agent DaemonSets; unset: every namespace.
        check_kubernetes: Unset: check whenever a cluster is reachable; true: a missing cluster
            fails the run; false: skip the DaemonSet check.
        stuck_window_minutes: How long an agent must have been refused (HTTP 409) to be
            reported as stuck.
    """
    log = get_run_logger()
    facts = gather_console_facts()
    daemonsets, not_checked = kubernetes_facts(check_kubernetes, kubeconfig, namespace)
    if not_checked:
        log.info("node-agent DaemonSets not checked: %s", not_checked)
    findings = evaluate(
        AuditFacts(
            agents=facts.agents,
            clusters=facts.clusters,
            rollouts=facts.rollouts,
            daemonsets=daemonsets,
            kubernetes_not_checked=not_checked,
            stuck_window=timedelta(minutes=stuck_window_minutes),
        )
    )
    ctx = get_run_context()
    flow_run_id = str(ctx.flow_run.id) if getattr(ctx, "flow_run", None) else None  # type: ignore[union-attr]
    run_id = store_findings(findings, flow_run_id)
    rows = [
        {
            "severity": f.severity.value,
            "finding": f.name,
            "subject": f.subject_name or "",
            "message": f.message,
            "fix": f.fix or "",
        }
        for f in findings
    ] or [
        {
            "severity": "-",
            "finding": "none",
            "subject": "",
            "message": "the fleet is healthy",
            "fix": "",
        }
    ]
    create_table_artifact(rows, key="fleet-audit", description=f"Fleet audit {run_id}")
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    log.info("fleet audit %s: %d findings %s", run_id, len(findings), counts)
    return {
        "audit_run_id": run_id,
        "findings": len(findings),
        "by_severity": counts,
        "names": sorted({f.name for f in findings}),
    }
