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
from flows.kube import KubeTarget, agent_daemonsets, api_client
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
def gather_kubernetes_facts(kubeconfig: str | None, namespace: str | None) -> list[DaemonSetFact]:
    return agent_daemonsets(api_client(KubeTarget(kubeconfig=kubeconfig)), namespace)


@task(name="store-findings", retries=2, retry_delay_seconds=2)
def store_findings(findings: list[Finding], flow_run_id: str | None) -> str:
    with ConsoleClient(FlowSettings()) as console:
        run = console.post_audit(AuditRunCreate(flow_run_id=flow_run_id, findings=findings))
        return run.id


@flow(name="fleet-audit")
def fleet_audit(
    kubeconfig: str | None = None,
    namespace: str | None = None,
    check_kubernetes: bool = False,
    stuck_window_minutes: float = 15,
) -> dict[str, object]:
    """Audit the fleet: shared identities, stuck 409s, offline agents, sync-interval drift, slug
    mismatches, DaemonSets sharing the host agent's directory, revoked keys still knocking."""
    log = get_run_logger()
    facts = gather_console_facts()
    daemonsets = gather_kubernetes_facts(kubeconfig, namespace) if check_kubernetes else []
    findings = evaluate(
        AuditFacts(
            agents=facts.agents,
            clusters=facts.clusters,
            rollouts=facts.rollouts,
            daemonsets=daemonsets,
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
