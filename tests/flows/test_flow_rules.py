"""The flows' pure rules on plain typed data (contracts views, no Console, no Prefect run): the
audit's findings, the enrollment check's gates, identity-release's rows, and the boundary rules
the flows keep (no English matched across processes, one shared-data-dir check)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contracts.inventory import InventoryProblem
from contracts.rollouts import ArtifactRef, RolloutPublic, TargetPublic
from contracts.views import OnboardingCheck, OnboardingStatus, ReleaseDecision
from contracts.vocabulary import (
    CommandFailureKind,
    DriverLostReason,
    ErrorReason,
    InventoryProblemKind,
    ReleaseOutcome,
    RolloutState,
    TargetStatus,
)
from flows import audit_rules
from flows.audit_rules import AuditFacts, DaemonSetFact, evaluate
from flows.enrollment_check import observe, report
from flows.hostdatadir import manifests, verification
from flows.hostdatadir.manifests import DEFAULT_DATA_DIR, shared_data_dir
from flows.identity_release import release_row
from testkit.views import agent_view, cluster_view, conflict_view

FLOWS = Path(audit_rules.__file__).parent
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def _rollout(*targets: TargetPublic) -> RolloutPublic:
    return RolloutPublic(
        id="r-1",
        name="canary",
        environment_id="env-1",
        target_version="0.9.0",
        artifact=ArtifactRef(
            version="0.9.0", url="http://a/b.pyz", sha256="0" * 64, signature="s" * 86
        ),
        state=RolloutState.STALLED,
        state_reason=None,
        created_at=NOW,
        started_at=NOW,
        finished_at=None,
        flow_run_id=None,
        wave_timeout_seconds=60,
        criteria=[],
        counts={},
        waves=[],
        exclusions=[],
        targets=list(targets),
    )


def _target(name: str, error: str | None, kind: CommandFailureKind | None) -> TargetPublic:
    return TargetPublic(
        agent_id=f"id-{name}",
        agent_name=name,
        wave=0,
        status=TargetStatus.FAILED,
        command_id="c",
        old_version="0.8.0",
        new_version=None,
        error=error,
        failure_kind=kind,
        dispatched_at=NOW,
        finished_at=NOW,
    )


def _names(facts: AuditFacts) -> list[tuple[str, str | None]]:
    return [(f.name, f.subject_name) for f in evaluate(facts)]


def test_self_update_failures_are_diagnosed_by_failure_kind_not_text():
    text = "backup current binary: rename …: read-only file system"
    facts = AuditFacts(
        agents=[],
        rollouts=[
            _rollout(
                _target("by-kind", "rename refused", CommandFailureKind.READ_ONLY_PROGRAM),
                _target("pod", "runs in a container", CommandFailureKind.NOT_SELF_UPDATABLE),
                _target("text-only", text, None),
                _target("other", text, CommandFailureKind.INSTALL_FAILED),
            )
        ],
    )
    assert _names(facts) == [
        ("self_update_answered_by_pod", "pod"),
        ("self_update_read_only_program", "by-kind"),
    ]
    by_name = {f.name: f for f in evaluate(facts)}
    # A host's own read-only program is not the shared-directory story: no hostDataDir advice.
    assert "hostDataDir" not in (by_name["self_update_read_only_program"].fix or "")
    assert "pod" not in by_name["self_update_read_only_program"].message
    assert "nodeAgent.hostDataDir" in (by_name["self_update_answered_by_pod"].fix or "")


def test_a_rollout_without_its_driver_is_a_finding_with_the_fix():
    lost = _rollout().model_copy(
        update={
            "driver_lost_reason": DriverLostReason.CANCELLED,
            "driver_lost_detail": "flow run f-1 is Cancelled",
        }
    )
    findings = evaluate(AuditFacts(agents=[], rollouts=[_rollout(), lost]))
    assert [(f.name, f.subject_id) for f in findings] == [("rollout_driver_lost", "r-1")]
    assert "restart-driver" in (findings[0].fix or "")
    assert findings[0].detail["reason"] == "cancelled"


def test_forbidden_argo_rollouts_is_found_by_the_inventory_problem_kind():
    problem = InventoryProblem(
        kind=InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS,
        resource="rollouts",
        message="the ClusterRole has no argoproj.io rollouts rule",
    )
    other = InventoryProblem(kind=InventoryProblemKind.FORBIDDEN, resource="jobs", message="x")
    prose = {"kind": "inventory_errors", "message": "forbidden to read argo rollouts"}
    facts = AuditFacts(
        agents=[],
        clusters=[
            cluster_view("prod", inventory_problems=[problem, other], warnings=[prose]),
            cluster_view("text-only", warnings=[prose]),
        ],
    )
    findings = evaluate(facts)
    assert [(f.name, f.subject_id) for f in findings] == [("argo_rollouts_forbidden", "prod")]
    assert problem.message in findings[0].message


def test_the_agent_rules_read_the_views_flags_and_conflict():
    recent = NOW - timedelta(minutes=1)
    agents = [
        agent_view("a1", "shared", flags=["shared_identity", "version_flapping"]),
        agent_view(
            "a2",
            "stuck",
            agent_type="k8s-node-monitor",
            flags=["enrollment_conflict"],
            conflict=conflict_view("identity_mismatch", 4, last_at=recent),
        ),
        agent_view(
            "a3",
            "old-409",
            flags=["enrollment_conflict"],
            conflict=conflict_view("name_in_use", 4, last_at=NOW - timedelta(hours=1)),
        ),
        agent_view("a4", "gone", status="offline", last_seen_at=NOW - timedelta(days=8)),
        agent_view("a5", "knocking", status="revoked", flags=["refused_still_connecting"]),
    ]
    findings = evaluate(AuditFacts(agents=agents, now=NOW))
    assert sorted((f.name, f.subject_name) for f in findings) == [
        ("offline_long", "host/gone"),
        ("revoked_still_connecting", "host/knocking"),
        ("shared_identity", "host/shared"),
        ("stuck_in_409", "k8s-node-monitor/stuck"),
        ("version_flapping", "host/shared"),
    ]
    stuck = next(f for f in findings if f.name == "stuck_in_409")
    assert stuck.detail == {"reason": "identity_mismatch", "count": 4}
    assert stuck.fix and "mount the host identity" in stuck.fix


def test_one_shared_data_dir_check_serves_the_audit_and_the_migration():
    assert audit_rules.shared_data_dir is manifests.shared_data_dir
    assert verification.shared_data_dir is manifests.shared_data_dir
    assert shared_data_dir("/var/lib/proxima-node-agent", ["n1"]) is None
    assert shared_data_dir(DEFAULT_DATA_DIR + "/", ["n2", "n1"]) == ("n1", "n2")
    assert shared_data_dir(DEFAULT_DATA_DIR, []) == ()
    ds = DaemonSetFact("proxima-system", "node-agent", DEFAULT_DATA_DIR, ("n1", "n2"))
    facts = AuditFacts(agents=[agent_view("h1", "n1")], daemonsets=[ds])
    (finding,) = evaluate(facts)
    assert (finding.name, finding.detail) == ("shared_data_dir", {"nodes": ["n1"]})


def test_an_audit_that_could_not_read_the_daemonsets_says_so_in_its_findings():
    node = agent_view("n1", "n1", agent_type="k8s-node-monitor")
    facts = AuditFacts(agents=[node], kubernetes_not_checked="no KUBECONFIG on the worker")
    (finding,) = evaluate(facts)
    assert finding.name == "kubernetes_not_checked"
    assert "no KUBECONFIG on the worker" in finding.message
    assert evaluate(AuditFacts(agents=[node])) == []
    # A fleet of hosts only has no DaemonSet to check: no finding, a healthy fleet stays quiet.
    host = agent_view("h1", "h1", agent_type="host")
    assert evaluate(AuditFacts(agents=[host], kubernetes_not_checked="no KUBECONFIG")) == []


def test_the_audit_finds_its_cluster_the_way_a_worker_is_configured(monkeypatch, tmp_path):
    from flows.audit import kubernetes_facts
    from flows.kube import KubeTarget, discover_target

    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert discover_target(None)[0] is None
    assert kubernetes_facts(None, None, None) == ([], discover_target(None)[1])
    assert kubernetes_facts(False, "/k", None) == ([], "turned off by check_kubernetes=false")
    with pytest.raises(ValueError, match="check_kubernetes=true but no cluster"):
        kubernetes_facts(True, None, None)
    assert discover_target("/a")[0] == KubeTarget(kubeconfig="/a")
    monkeypatch.setenv("KUBECONFIG", f"/b{os.pathsep}/c")
    assert discover_target(None)[0] == KubeTarget(kubeconfig="/b")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert discover_target(None) == (KubeTarget(), "the worker's in-cluster ServiceAccount")


def test_no_english_text_from_another_process_is_matched_in_flows():
    texts = re.compile(r"read-only file system|forbidden to read argo", re.IGNORECASE)
    sources = sorted(FLOWS.rglob("*.py"))
    assert len(sources) > 10
    matched = [str(p) for p in sources if texts.search(p.read_text())]
    assert matched == []


def _status(**gates: bool) -> OnboardingStatus:
    checks = [
        OnboardingCheck(key=k, title=k, ok=ok, detail=f"{k} detail", causes=[])
        for k, ok in gates.items()
    ]
    return OnboardingStatus(
        slug="prod",
        checks=checks,
        done=all(gates.values()),
        node_agents=2,
        nodes=None,
        tokens_usable=1,
    )


def test_the_enrollment_check_takes_the_consoles_gates_and_counts_nodes_itself():
    state = observe(_status(enrollment=True, heartbeat=True, inventory=False), nodes=3)
    assert (state.enrollment, state.heartbeat, state.inventory) == (True, True, False)
    assert (state.node_agents, state.nodes, state.nodes_ok) == (2, 3, False)
    passed, text = report("prod", state)
    assert not passed
    assert "Missing: inventory, nodes" in text and "inventory detail" in text
    assert observe(None, nodes=None).done() == 1  # no cluster: only the uncounted nodes pass
    done = observe(_status(enrollment=True, heartbeat=True, inventory=True), nodes=2)
    assert done.done() == 4 and report("prod", done)[0]


def test_the_enrollment_check_counts_the_nodes_the_daemonset_is_scheduled_on():
    """A node the node-agent DaemonSet leaves out (a tainted control plane) is not missing."""
    done = observe(_status(enrollment=True, heartbeat=True, inventory=True), 2, cluster_nodes=3)
    passed, text = report("prod", done)
    assert passed and done.nodes_ok
    assert "node agents 2/2 (the node-agent DaemonSet is scheduled on 2 of the 3 nodes" in text
    every = observe(_status(enrollment=True, heartbeat=True, inventory=True), 3, cluster_nodes=3)
    assert not report("prod", every)[0]
    assert "node agents 2/3\n" in report("prod", every)[1] + "\n"


def test_identity_release_rows_show_the_consoles_answer():
    refused = ReleaseDecision(
        agent_id="a",
        outcome=ReleaseOutcome.REFUSED,
        reason=ErrorReason.AGENT_RECENTLY_SEEN,
        message="seen 1 s ago",
    )
    assert release_row("host/a", refused, dry_run=True) == {
        "agent": "host/a",
        "outcome": "refused",
        "reason": "agent_recently_seen",
        "message": "seen 1 s ago",
    }
    would = ReleaseDecision(agent_id="a", outcome=ReleaseOutcome.WOULD_RELEASE)
    assert release_row("host/a", would, dry_run=True)["message"] == "dry run: nothing changed"
    done = ReleaseDecision(agent_id="a", outcome=ReleaseOutcome.RELEASED, dry_run=False)
    assert release_row("host/a", done, dry_run=False) == {
        "agent": "host/a",
        "outcome": "released",
        "reason": "",
        "message": "the next enrollment re-binds this record",
    }


def test_no_flow_copies_the_quiet_window():
    import inspect

    from flows.identity_release import identity_release
    from flows.migration import hostdatadir_migration

    migration = inspect.signature(hostdatadir_migration.fn).parameters
    assert migration["quiet_window_seconds"].default is None  # None: the Console's own
    release = inspect.signature(identity_release.fn).parameters
    assert not [name for name in release if "quiet" in name]  # the Console's dry run decides
    sources = [p.read_text() for p in sorted(FLOWS.rglob("*.py"))]
    assert not [s for s in sources if re.search(r"quiet\w*: float = \d", s)]


def test_the_documented_worker_scopes_are_the_ones_the_flow_tests_run_with():
    """docs/flows.md lists the worker token's scopes; testkit's worker_token() (which every flow
    test's PROXIMA_CONSOLE_TOKEN is) mints exactly flows.settings.WORKER_SCOPES."""
    from contracts.vocabulary import Scope
    from flows.settings import WORKER_SCOPES

    docs = (Path(__file__).parents[2] / "docs" / "flows.md").read_text()
    block = docs.split("<!-- worker-scopes -->")[1].split("<!-- /worker-scopes -->")[0]
    assert tuple(re.findall(r"`([a-z]+:[a-z]+)`", block)) == WORKER_SCOPES
    assert all(isinstance(s, Scope) for s in WORKER_SCOPES)
    assert Scope.TOKENS_WRITE not in WORKER_SCOPES and Scope.CLUSTERS_WRITE not in WORKER_SCOPES
