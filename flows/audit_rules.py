"""The fleet audit's rules: pure functions from facts (what the Console and the Kubernetes API
report) to named findings with severities and the fix. Each story of the seed's failure modes
has a rule here; ``docs/audit.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.audit import Finding, Severity
from contracts.rollouts import RolloutPublic

DEFAULT_DATA_DIR = "/var/lib/proxima-agent"
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
    agents: Sequence[Mapping[str, Any]]
    clusters: Sequence[Mapping[str, Any]] = ()
    rollouts: Sequence[RolloutPublic] = ()
    """Recent rollouts with their targets."""
    daemonsets: Sequence[DaemonSetFact] = ()
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    stuck_window: timedelta = timedelta(minutes=15)
    long_offline: timedelta = timedelta(days=7)


def _ts(value: Any) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _agent_finding(
    a: Mapping[str, Any],
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
        subject_id=a["id"],
        subject_name=f"{a['agent_type']}/{a['name']}",
        message=message,
        fix=fix,
        detail=dict(detail),
    )


_CONFLICT_FIX = {
    "name_in_use": "another live process holds this name: find it (two agents on one data "
    "directory, or a pod still running) before releasing anything",
    "no_identity_evidence": "the old record has no identity evidence to re-bind on: free it with "
    "POST /api/v1/fleet/agents/{agentID}/release-identity once it is quiet",
    "identity_mismatch": "the agent presents no machine-id/DMI uuid the record carries (no "
    "host-root mount?): mount the host identity or release the old record",
    "agent_revoked": "the name belongs to a revoked record: it is never re-bound",
}


def agent_rules(facts: AuditFacts) -> Iterable[Finding]:
    for a in facts.agents:
        flags = set(a.get("flags", ()))
        label = f"{a['agent_type']} {a['name']!r}"
        if "shared_identity" in flags:
            yield _agent_finding(
                a,
                "shared_identity",
                Severity.CRITICAL,
                f"{label}: two processes heartbeat as one identity (one state.json, two agents)",
                SEPARATE_DIR_FIX,
            )
        if "version_flapping" in flags:
            yield _agent_finding(
                a,
                "version_flapping",
                Severity.HIGH,
                f"{label}: its reported version flaps between processes sharing the identity",
                SEPARATE_DIR_FIX,
            )
        conflict = a.get("conflict") or {}
        last = _ts(conflict.get("last_at"))
        if "enrollment_conflict" in flags and last and facts.now - last <= facts.stuck_window:
            reason = str(conflict.get("reason"))
            yield _agent_finding(
                a,
                "stuck_in_409",
                Severity.HIGH,
                f"{label}: enrollment keeps answering 409 {reason} ({conflict.get('count')} "
                "attempts): an agent is running but never enrolls",
                _CONFLICT_FIX.get(reason),
                reason=reason,
                count=conflict.get("count"),
            )
        if "refused_still_connecting" in flags:
            yield _agent_finding(
                a,
                "revoked_still_connecting",
                Severity.WARNING,
                f"{label}: a retired key keeps trying to connect "
                f"({a.get('refused_connections')} refused connections)",
                "stop the process still holding the old identity, or release/re-enroll it",
                refused=a.get("refused_connections"),
            )
        seen = _ts(a.get("last_seen_at"))
        if a.get("status") == "offline":
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
        for w in c.get("warnings", ()):
            kind = w["kind"]
            if kind == "inventory_errors":
                if "forbidden to read argo rollouts" in w["message"]:
                    yield Finding(
                        name="argo_rollouts_forbidden",
                        severity=Severity.WARNING,
                        subject_kind="cluster",
                        subject_id=c["slug"],
                        subject_name=c["name"],
                        message=f"cluster {c['slug']}: {w['message']}",
                        fix="helm upgrade to the current chart (upgrading the image alone does "
                        "not add the argoproj.io rollouts rule)",
                    )
                continue
            severity, fix = names.get(kind, (Severity.WARNING, None))
            yield Finding(
                name="unregistered_cluster" if kind == "unregistered" else kind,
                severity=severity,
                subject_kind="cluster",
                subject_id=c["slug"],
                subject_name=c["name"],
                message=f"cluster {c['slug']}: {w['message']}",
                fix=fix,
            )


def rollout_rules(facts: AuditFacts) -> Iterable[Finding]:
    """A host agent whose self_update failed on a read-only path shares its identity with a pod
    (the seed's 'Fleet rollouts fail against healthy hosts')."""
    for r in facts.rollouts:
        for t in r.targets or ():
            if t.error and "read-only file system" in t.error:
                yield Finding(
                    name="self_update_on_read_only_image",
                    severity=Severity.HIGH,
                    subject_kind="agent",
                    subject_id=t.agent_id,
                    subject_name=t.agent_name,
                    message=f"rollout {r.name!r}: {t.agent_name} reported "
                    f"{t.error!r} — a pod on a read-only image answered for this host",
                    fix=SEPARATE_DIR_FIX,
                    detail={"rollout_id": r.id},
                )


def daemonset_rules(facts: AuditFacts) -> Iterable[Finding]:
    host_agents = {a["name"] for a in facts.agents if a["agent_type"] == "host"}
    for ds in facts.daemonsets:
        if ds.data_host_path is None:
            continue
        shared = sorted(set(ds.node_names) & host_agents)
        path = ds.data_host_path.rstrip("/") or "/"
        if path == DEFAULT_DATA_DIR and (shared or not ds.node_names):
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
                detail={"nodes": shared},
            )


def evaluate(facts: AuditFacts) -> list[Finding]:
    order = {Severity.CRITICAL: 0, Severity.HIGH: 1, Severity.WARNING: 2, Severity.INFO: 3}
    findings = [
        *agent_rules(facts),
        *cluster_rules(facts),
        *rollout_rules(facts),
        *daemonset_rules(facts),
    ]
    return sorted(findings, key=lambda f: (order[f.severity], f.name, f.subject_name or ""))
