"""The fleet audit's rules: pure functions from facts (what the Console and the Kubernetes API
report) to named findings with severities and the fix. Each failure story of the chart's page
has a rule here; ``docs/audit.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.audit import Finding, Severity
from contracts.rollouts import RolloutPublic
from contracts.views import AgentView, ClusterView
from contracts.vocabulary import (
    AgentFlag,
    AgentStatus,
    AgentType,
    CommandFailureKind,
    ErrorReason,
    InventoryProblemKind,
)
from flows.hostdatadir.manifests import shared_data_dir
from flows.reasons import parse_reason

SEPARATE_DIR_FIX = (
    "give the DaemonSet its own host directory: helm upgrade … --set "
    "nodeAgent.hostDataDir=/var/lib/proxima-node-agent (Running Alongside a Host Agent)"
)


@dataclass(frozen=True)
class DaemonSetFact:
    namespace: str
    name: str
    data_host_path: str | None
    node_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuditFacts:
    agents: Sequence[AgentView]
    clusters: Sequence[ClusterView] = ()
    rollouts: Sequence[RolloutPublic] = ()
    """Recent rollouts with their targets."""
    daemonsets: Sequence[DaemonSetFact] = ()
    kubernetes_not_checked: str | None = None
    """Why the DaemonSets were not read (None: they were)."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    stuck_window: timedelta = timedelta(minutes=15)
    long_offline: timedelta = timedelta(days=7)


def _ts(value: datetime | str | None) -> datetime | None:
    if not value:
        return None
    parsed = (
        value
        if isinstance(value, datetime)
        else datetime.fromisoformat(value.replace("Z", "+00:00"))
    )
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _agent_finding(
    a: AgentView,
    name: str,
    severity: Severity,
    message: str,
    fix: str | None = None,
    **detail: Any,
) -> Finding:
    return Finding(
        name=name,
        severity=severity,
        subject_kind="agent",
        subject_id=a.id,
        subject_name=f"{a.agent_type}/{a.name}",
        message=message,
        fix=fix,
        detail=dict(detail),
    )


_CONFLICT_FIX: dict[ErrorReason | str, str] = {
    ErrorReason.NAME_IN_USE: "another live process holds this name: find it (two agents on "
    "one data directory, or a pod still running) before releasing anything",
    ErrorReason.NO_IDENTITY_EVIDENCE: "the old record has no identity evidence to re-bind on: "
    "free it with POST /api/v1/fleet/agents/{agentID}/release-identity once it is quiet",
    ErrorReason.IDENTITY_MISMATCH: "the agent presents no machine-id/DMI uuid the record "
    "carries (no host-root mount?): mount the host identity or release the old record",
    ErrorReason.AGENT_REVOKED: "the name belongs to a revoked record: it is never re-bound",
}


def agent_rules(facts: AuditFacts) -> Iterable[Finding]:
    for a in facts.agents:
        flags = set(a.flags)
        label = f"{a.agent_type} {a.name!r}"
        if AgentFlag.SHARED_IDENTITY in flags:
            yield _agent_finding(
                a,
                "shared_identity",
                Severity.CRITICAL,
                f"{label}: two processes heartbeat as one identity (one state.json, two agents)",
                SEPARATE_DIR_FIX,
            )
        if AgentFlag.VERSION_FLAPPING in flags:
            yield _agent_finding(
                a,
                "version_flapping",
                Severity.HIGH,
                f"{label}: its reported version flaps between processes sharing the identity",
                SEPARATE_DIR_FIX,
            )
        conflict = a.conflict if AgentFlag.ENROLLMENT_CONFLICT in flags else None
        last = _ts(conflict.last_at) if conflict else None
        if conflict and last and facts.now - last <= facts.stuck_window:
            reason = parse_reason(str(conflict.reason))
            yield _agent_finding(
                a,
                "stuck_in_409",
                Severity.HIGH,
                f"{label}: enrollment keeps answering 409 {reason} ({conflict.count} "
                "attempts): an agent is running but never enrolls",
                _CONFLICT_FIX.get(reason),
                reason=str(reason),
                count=conflict.count,
            )
        if AgentFlag.REBOUND in flags:
            yield _agent_finding(
                a,
                "rebound",
                Severity.WARNING,
                f"{label}: re-bound onto another machine (quiet, every kind of identity "
                "evidence matched); the previous key was retired and its commands cancelled",
                "expected after moving an agent (hostDataDir change, reinstall); otherwise check "
                "the record's history for the install token used and revoke it",
            )
        if AgentFlag.REFUSED_STILL_CONNECTING in flags:
            yield _agent_finding(
                a,
                "revoked_still_connecting",
                Severity.WARNING,
                f"{label}: a retired key keeps trying to connect "
                f"({a.refused_connections} refused connections)",
                "stop the process still holding the old identity, or release/re-enroll it",
                refused=a.refused_connections,
            )
        seen = _ts(a.last_seen_at)
        if a.status is AgentStatus.OFFLINE:
            long = seen is not None and facts.now - seen > facts.long_offline
            yield _agent_finding(
                a,
                "offline_long" if long else "offline",
                Severity.INFO if long else Severity.WARNING,
                f"{label}: no heartbeat since {seen.isoformat() if seen else 'enrollment'}"
                + (" — a record left by an uninstall?" if long else ""),
                "uninstalling leaves records in the Console; revoke records of machines that "
                "are gone"
                if long
                else "check the agent's host and its NATS connectivity",
            )


def cluster_rules(facts: AuditFacts) -> Iterable[Finding]:
    names = {
        "sync_interval_drift": (
            Severity.WARNING,
            "set PROXIMA_K8S_SYNC_INTERVAL and clusterAgent.syncInterval to the same value",
        ),
        "slug_mismatch": (
            Severity.HIGH,
            "set clusterAgent.clusterSlug to the slug the Console recorded",
        ),
        "unregistered": (Severity.WARNING, "register the cluster or fix clusterAgent.clusterSlug"),
        "inventory_truncated": (Severity.INFO, "raise clusterAgent.podLimit"),
    }
    for c in facts.clusters:
        for w in c.warnings:
            if w.kind == "inventory_errors":
                continue  # prose; the facts are the cluster's inventory_problems (below)
            severity, fix = names.get(w.kind, (Severity.WARNING, None))
            yield Finding(
                name="unregistered_cluster" if w.kind == "unregistered" else w.kind,
                severity=severity,
                subject_kind="cluster",
                subject_id=c.slug,
                subject_name=c.name,
                message=f"cluster {c.slug}: {w.message}",
                fix=fix,
            )
        for problem in c.inventory_problems:
            if problem.kind is InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS:
                yield Finding(
                    name="argo_rollouts_forbidden",
                    severity=Severity.WARNING,
                    subject_kind="cluster",
                    subject_id=c.slug,
                    subject_name=c.name,
                    message=f"cluster {c.slug}: {problem.message}",
                    fix="helm upgrade to the current chart (upgrading the image alone does "
                    "not add the argoproj.io rollouts rule)",
                )


#: what a self_update's structured failure says about the target, and what to do about it
_SELF_UPDATE_DIAGNOSES = {
    # Only a Kubernetes agent answers not_self_updatable, and rollouts target only agents that
    # can self-update: a pod answered for this record, so it shares the host's identity (the
    # chart page's "Fleet rollouts fail against healthy hosts").
    CommandFailureKind.NOT_SELF_UPDATABLE: (
        "self_update_answered_by_pod",
        "a Kubernetes node agent answered for this host: the pod shares the host agent's "
        "identity (data directory)",
        SEPARATE_DIR_FIX,
    ),
    # A host agent that cannot write its own program file or directory.
    CommandFailureKind.READ_ONLY_PROGRAM: (
        "self_update_read_only_program",
        "the agent cannot replace its own program: the program file or its directory is not "
        "writable for the agent's user (read-only mount, or owned by another user)",
        "make the program path writable for the agent's user (or install builds with your "
        "package manager and leave this agent out of rollouts)",
    ),
}


def rollout_rules(facts: AuditFacts) -> Iterable[Finding]:
    """Self-update failures diagnosed from the agent's structured ``failure_kind``, never from
    its text."""
    for r in facts.rollouts:
        for t in r.targets or ():
            kind = t.failure_kind
            diagnosis = _SELF_UPDATE_DIAGNOSES.get(kind) if kind else None
            if kind is None or diagnosis is None:
                continue
            name, meaning, fix = diagnosis
            yield Finding(
                name=name,
                severity=Severity.HIGH,
                subject_kind="agent",
                subject_id=t.agent_id,
                subject_name=t.agent_name,
                message=f"rollout {r.name!r}: {t.agent_name}: {meaning} ({t.error})",
                fix=fix,
                detail={"rollout_id": r.id, "failure_kind": kind.value},
            )


def driver_rules(facts: AuditFacts) -> Iterable[Finding]:
    """A rollout the Console found without its flow run (``driver_lost_reason``): nothing
    drives it until someone restarts the driver."""
    for r in facts.rollouts:
        if r.driver_lost_reason is not None:
            yield Finding(
                name="rollout_driver_lost",
                severity=Severity.HIGH,
                subject_kind="rollout",
                subject_id=r.id,
                subject_name=r.name,
                message=f"rollout {r.name!r} is {r.state} but lost its driver "
                f"({r.driver_lost_reason}): {r.driver_lost_detail or 'no detail'}",
                fix=f"POST /api/v1/fleet/rollouts/{r.id}/restart-driver (or Restart driver on "
                "the rollout's page): a fresh fleet-rollout run continues where it stopped",
                detail={"rollout_id": r.id, "reason": str(r.driver_lost_reason)},
            )


def daemonset_rules(facts: AuditFacts) -> Iterable[Finding]:
    runs_kubernetes = bool(facts.clusters) or any(
        a.agent_type is not AgentType.HOST for a in facts.agents
    )
    if facts.kubernetes_not_checked is not None and runs_kubernetes:
        yield Finding(
            name="kubernetes_not_checked",
            severity=Severity.INFO,
            subject_kind="audit",
            message="the node-agent DaemonSets' data directories were not checked: "
            + facts.kubernetes_not_checked,
            fix="give the worker a kubeconfig (KUBECONFIG, or the kubeconfig parameter) or run "
            "it in the cluster with read access to DaemonSets and Nodes",
        )
    host_agents = {a.name for a in facts.agents if a.agent_type is AgentType.HOST}
    for ds in facts.daemonsets:
        shared = shared_data_dir(ds.data_host_path, set(ds.node_names) & host_agents)
        if shared is not None and (shared or not ds.node_names):
            yield Finding(
                name="shared_data_dir",
                severity=Severity.CRITICAL if shared else Severity.WARNING,
                subject_kind="daemonset",
                subject_id=f"{ds.namespace}/{ds.name}",
                subject_name=ds.name,
                message=f"DaemonSet {ds.namespace}/{ds.name} mounts its data volume from "
                f"{ds.data_host_path}, the host agent's directory"
                + (f", on nodes that run a host agent: {', '.join(shared)}" if shared else ""),
                fix=SEPARATE_DIR_FIX,
                detail={"nodes": list(shared)},
            )


def evaluate(facts: AuditFacts) -> list[Finding]:
    order = {Severity.CRITICAL: 0, Severity.HIGH: 1, Severity.WARNING: 2, Severity.INFO: 3}
    findings = [
        *agent_rules(facts),
        *cluster_rules(facts),
        *rollout_rules(facts),
        *driver_rules(facts),
        *daemonset_rules(facts),
    ]
    return sorted(findings, key=lambda f: (order[f.severity], f.name, f.subject_name or ""))
