"""The pure parts of hostdatadir-migration (flows/hostdatadir), on plain data: no Prefect, no
Console, no cluster."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from contracts.vocabulary import ErrorReason
from flows.hostdatadir.errors import MigrationBlockedError, check_apply
from flows.hostdatadir.manifests import DEFAULT_DATA_DIR, ClusterFacts, cluster_facts
from flows.hostdatadir.progress import NodeProgress, NodeState, Verdict, release_refused
from flows.hostdatadir.records import migration_nodes
from flows.hostdatadir.verification import failed_checks, verify_migration
from rollout_policy import (
    AgentId,
    MigrationPlan,
    MigrationRow,
    NodeClass,
    NodeName,
    plan_hostdatadir_migration,
)
from testkit.views import agent_view

NEW_DIR = "/var/lib/proxima-node-agent"


def _row(node: str, node_class: NodeClass, agent_id: str | None) -> MigrationRow:
    return MigrationRow(
        node=NodeName(node),
        node_class=node_class,
        agent_id=AgentId(agent_id) if agent_id else None,
        reasons=(),
        host_agent_running=node_class is NodeClass.HOST_AGENT_PRESENT,
        host_identity_readable=True,
        action="",
        releasable=True,
    )


def _daemonset(data_path: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "proxima-system", "name": "proxima-agent-node"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "containers": [{"name": "node-agent"}],
                    "volumes": [{"name": "data", "hostPath": {"path": data_path}}],
                }
            }
        },
    }


def _node(name: str, os: str = "linux") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/os": os}}, "spec": {}}


def test_cluster_facts_leave_out_the_nodes_the_daemonset_does_not_run_on():
    facts = cluster_facts(
        _daemonset(DEFAULT_DATA_DIR), [_node("b"), _node("w", os="windows"), _node("a")]
    )
    assert facts == ClusterFacts(
        daemonset="proxima-system/proxima-agent-node",
        data_path=DEFAULT_DATA_DIR,
        host_identity=(),
        nodes=("a", "b"),
        skipped=("w",),
    )


def test_a_node_with_an_online_host_record_has_a_host_agent():
    cluster = ClusterFacts("ns/ds", DEFAULT_DATA_DIR, ("machine-id",), ("n1", "n2"))
    agents = [
        agent_view("h1", "n1", "host"),
        agent_view("m2", "n2", "k8s-node-monitor"),
        agent_view("h2", "n2", "host", status="offline"),
    ]
    nodes = migration_nodes(cluster, agents)
    assert [(n.name, n.host_agent_running, len(n.records)) for n in nodes] == [
        ("n1", True, 1),
        ("n2", False, 2),
    ]
    assert all(n.host_identity_readable for n in nodes)


def _progress(**kwargs: Any) -> NodeProgress:
    rows = {
        "n1": _row("n1", NodeClass.REBIND_POSSIBLE, "ag-1"),
        "n2": _row("n2", NodeClass.FRESH, None),
    }
    return NodeProgress(
        rows=rows, before={}, window=2, require_new_instance=True, started=100.0, **kwargs
    )


def test_progress_times_out_only_after_no_node_finished_for_the_timeout():
    progress = _progress()
    assert progress.pending() == ["n1", "n2"]
    assert progress.observe("n1", Verdict(NodeState.WAITING, "w"), now=101)
    assert not progress.observe("n1", Verdict(NodeState.WAITING, "still"), now=102)
    assert progress.observe("n2", Verdict(NodeState.DONE, "enrolled as ag-2"), now=150)
    assert progress.pending() == ["n1"] and progress.percent() == 50.0
    assert not progress.stalled(159, timeout_seconds=10)  # counted from n2 finishing
    assert progress.stalled(161, timeout_seconds=10)
    progress.time_out(10)
    assert not progress.pending() and progress.complete
    outcomes = {o["node"]: o for o in progress.outcomes()}
    assert outcomes["n1"]["outcome"] == "timed_out"
    assert outcomes["n1"]["detail"] == "no node finished for 10 s; last: still"
    assert progress.text() == "1/2 nodes back"


def test_a_release_is_remembered_and_a_refused_one_retries_only_when_recently_seen():
    progress = _progress()
    asked = Verdict(NodeState.WAITING_QUIET, "x", release=AgentId("ag-1"), record="ag-1")
    done = progress.mark_released("n1", asked)
    assert (done.state, "n1" in progress.released) == (NodeState.RELEASED, True)
    assert (
        release_refused(asked, ErrorReason.AGENT_RECENTLY_SEEN, "m").state
        is NodeState.WAITING_QUIET
    )
    assert release_refused(asked, ErrorReason.AGENT_REVOKED, "m").state is NodeState.FAILED


def test_verification_passes_when_every_node_kept_its_record_and_hosts_their_own():
    rows = (
        _row("n1", NodeClass.REBIND_POSSIBLE, "ag-1"),
        _row("n2", NodeClass.HOST_AGENT_PRESENT, None),
    )
    plan = MigrationPlan(rows=rows, quiet_window_seconds=2)
    before = [agent_view("h2", "n2", "host")]
    after = [
        agent_view("ag-1", "n1", "k8s-node-monitor"),
        agent_view("m2", "n2", "k8s-node-monitor"),
        agent_view("h2", "n2", "host"),
    ]
    checks = verify_migration(plan, before, after, NEW_DIR, NEW_DIR, "ns/ds")
    assert checks and not failed_checks(checks)
    moved_back = verify_migration(plan, before, after, DEFAULT_DATA_DIR, NEW_DIR, "ns/ds")
    assert {c["check"] for c in failed_checks(moved_back)} == {
        "hostDataDir applied",
        "no shared data directory",
    }
    with pytest.raises(ValueError, match="two agents must never share"):
        check_apply(plan, data_path=NEW_DIR, new_dir=DEFAULT_DATA_DIR)


def test_an_apply_that_moves_refuses_a_blocked_plan():
    cluster = ClusterFacts("ns/ds", DEFAULT_DATA_DIR, ("machine-id",), ("n1",))
    revoked = agent_view("ag-1", "n1", "k8s-node-monitor", status="revoked")
    plan = plan_hostdatadir_migration(migration_nodes(cluster, [revoked]), quiet_window_seconds=2)
    assert plan.blocked
    with pytest.raises(MigrationBlockedError):
        check_apply(plan, data_path=DEFAULT_DATA_DIR, new_dir=NEW_DIR)
    check_apply(plan, data_path=NEW_DIR, new_dir=NEW_DIR)  # not moving: waits and verifies


def test_the_pure_modules_load_without_prefect_or_an_http_client():
    code = (
        "import sys, flows.hostdatadir.errors, flows.hostdatadir.manifests, "
        "flows.hostdatadir.progress, flows.hostdatadir.records, flows.hostdatadir.reports, "
        "flows.hostdatadir.verification; "
        "print(sorted({'prefect', 'httpx', 'kubernetes'} & set(sys.modules)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
