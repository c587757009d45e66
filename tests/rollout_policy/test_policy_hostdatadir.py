"""The hostDataDir migration plan: each node classified, with the reason and the action."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_policy import (
    AgentId,
    AgentRecord,
    MigrationInputError,
    MigrationNode,
    NodeClass,
    NodeName,
    ReleaseReason,
    plan_hostdatadir_migration,
)


def monitor(agent_id: str, **overrides: object) -> AgentRecord:
    fields: dict[str, object] = {
        "agent_id": AgentId(agent_id),
        "agent_type": "k8s-node-monitor",
        "last_seen_age_seconds": 20.0,
        "has_identity_evidence": True,
    }
    fields.update(overrides)
    return AgentRecord(**fields)  # type: ignore[arg-type]


def host(agent_id: str) -> AgentRecord:
    return AgentRecord(
        agent_id=AgentId(agent_id),
        agent_type="host",
        last_seen_age_seconds=10.0,
        has_identity_evidence=True,
        shared_identity=True,
    )


def node(
    name: str, *records: AgentRecord, host_agent: bool = False, readable: bool = True
) -> MigrationNode:
    return MigrationNode(
        name=NodeName(name),
        records=records,
        host_agent_running=host_agent,
        host_identity_readable=readable,
    )


WORKED_EXAMPLE = [
    node("worker-1", host("ag-h1"), host_agent=True),
    node("worker-2", monitor("ag-n2")),
    node("worker-3", monitor("ag-n3", has_identity_evidence=False)),
    node("worker-4", monitor("ag-n4"), readable=False),
    node("worker-5"),
    node("worker-6", monitor("ag-n6", revoked=True, last_seen_age_seconds=86400.0)),
    node("worker-7", monitor("ag-n7", shared_identity=True)),
    node("worker-8", host("ag-h8"), monitor("ag-n8", last_seen_age_seconds=30.0), host_agent=True),
]


def test_the_worked_example_from_the_docs() -> None:
    """docs/rollout-policy.md, "hostDataDir migration": eight nodes, every class and reason."""
    plan = plan_hostdatadir_migration(reversed(WORKED_EXAMPLE))
    assert [(row.node, row.node_class, row.agent_id, row.reasons) for row in plan.rows] == [
        ("worker-1", NodeClass.HOST_AGENT_PRESENT, None, ()),
        ("worker-2", NodeClass.REBIND_POSSIBLE, "ag-n2", ()),
        ("worker-3", NodeClass.NEEDS_RELEASE, "ag-n3", (ReleaseReason.NO_EVIDENCE,)),
        ("worker-4", NodeClass.NEEDS_RELEASE, "ag-n4", (ReleaseReason.NO_HOST_IDENTITY,)),
        ("worker-5", NodeClass.FRESH, None, ()),
        ("worker-6", NodeClass.NEEDS_RELEASE, "ag-n6", (ReleaseReason.REVOKED,)),
        ("worker-7", NodeClass.NEEDS_RELEASE, "ag-n7", (ReleaseReason.NOT_QUIET,)),
        ("worker-8", NodeClass.NEEDS_RELEASE, "ag-n8", (ReleaseReason.NOT_QUIET,)),
    ]
    assert plan.count_by_class() == {
        NodeClass.FRESH: 1,
        NodeClass.HOST_AGENT_PRESENT: 1,
        NodeClass.REBIND_POSSIBLE: 1,
        NodeClass.NEEDS_RELEASE: 5,
    }
    assert [row.node for row in plan.blocked] == ["worker-6", "worker-7", "worker-8"]
    assert plan.table()[2] == {
        "node": "worker-3",
        "class": "needs_release",
        "record": "ag-n3",
        "host agent": "no",
        "host identity": "readable",
        "why": "no_evidence",
        "action": "release ag-n3 once it has been quiet for 5m; the pod re-binds",
    }
    assert plan.table()[1]["action"] == "none: re-binds to ag-n2 once it has been quiet for 5m"
    assert "revoked and release refuses it" in plan.table()[5]["action"]
    assert plan.table()[6]["action"].startswith("stop the other process reporting as ag-n7")


def test_a_host_agent_node_with_a_long_quiet_monitor_record_rebinds() -> None:
    """An old node-monitor record from before the host agent still holds the name."""
    plan = plan_hostdatadir_migration(
        [node("w", host("h"), monitor("n", last_seen_age_seconds=3600.0), host_agent=True)]
    )
    assert plan.rows[0].node_class is NodeClass.REBIND_POSSIBLE


def test_quiet_means_more_than_the_window() -> None:
    at_window = node("w", host("h"), monitor("n", last_seen_age_seconds=300.0), host_agent=True)
    assert plan_hostdatadir_migration([at_window]).rows[0].reasons == (ReleaseReason.NOT_QUIET,)
    plan = plan_hostdatadir_migration([at_window], quiet_window_seconds=60)
    assert plan.rows[0].node_class is NodeClass.REBIND_POSSIBLE
    assert "quiet for 1m" in plan.rows[0].action


def test_every_reason_that_applies_is_listed_blockers_first() -> None:
    plan = plan_hostdatadir_migration(
        [node("w", monitor("n", revoked=True, has_identity_evidence=False), readable=False)]
    )
    assert plan.rows[0].reasons == (
        ReleaseReason.REVOKED,
        ReleaseReason.NO_HOST_IDENTITY,
        ReleaseReason.NO_EVIDENCE,
    )
    assert not plan.rows[0].releasable


def test_a_node_listed_twice_is_refused() -> None:
    with pytest.raises(MigrationInputError) as caught:
        plan_hostdatadir_migration([node("w"), node("w")])
    assert caught.value.node == "w"


def test_two_monitor_records_under_one_name_are_refused() -> None:
    with pytest.raises(MigrationInputError, match="2 k8s-node-monitor records"):
        plan_hostdatadir_migration([node("w", monitor("a"), monitor("b"))])


records = st.builds(
    AgentRecord,
    agent_id=st.sampled_from(["r1", "r2"]).map(AgentId),
    agent_type=st.sampled_from(["host", "k8s-node-monitor", "k8s-cluster-collector"]),
    last_seen_age_seconds=st.one_of(st.none(), st.floats(0, 10_000)),
    has_identity_evidence=st.booleans(),
    revoked=st.booleans(),
    shared_identity=st.booleans(),
)
nodes = st.builds(
    MigrationNode,
    name=st.text("abc", min_size=1, max_size=3).map(NodeName),
    records=st.lists(records, max_size=3)
    .filter(lambda rs: sum(r.agent_type == "k8s-node-monitor" for r in rs) <= 1)
    .map(tuple),
    host_agent_running=st.booleans(),
    host_identity_readable=st.booleans(),
)


@settings(deadline=None)
@given(st.lists(nodes, max_size=12, unique_by=lambda n: n.name))
def test_every_node_gets_one_consistent_row(given_nodes: list[MigrationNode]) -> None:
    plan = plan_hostdatadir_migration(given_nodes)
    assert [row.node for row in plan.rows] == sorted(n.name for n in given_nodes)
    by_name = {n.name: n for n in given_nodes}
    for row in plan.rows:
        has_monitor = any(r.agent_type == "k8s-node-monitor" for r in by_name[row.node].records)
        assert (row.agent_id is not None) == has_monitor
        assert bool(row.reasons) == (row.node_class is NodeClass.NEEDS_RELEASE)
        if row.node_class is NodeClass.REBIND_POSSIBLE:
            assert row.host_identity_readable
        if not has_monitor:
            assert row.node_class in (NodeClass.FRESH, NodeClass.HOST_AGENT_PRESENT)
        assert set(row.as_table_row()) == {
            "node",
            "class",
            "record",
            "host agent",
            "host identity",
            "why",
            "action",
        }


def test_a_released_record_without_evidence_re_binds_whatever_the_node_shows() -> None:
    """The Console re-binds a released record on the next enrollment, before any quiet check
    (rollout_policy.identities.decide_enrollment, rule 4)."""
    plan = plan_hostdatadir_migration(
        [
            MigrationNode(
                name=NodeName("n1"),
                records=(
                    monitor(
                        "a-1",
                        released=True,
                        last_seen_age_seconds=1.0,
                        has_identity_evidence=False,
                    ),
                ),
                host_agent_running=True,
                host_identity_readable=False,
            )
        ]
    )
    (row,) = plan.rows
    assert (row.node_class, row.reasons, row.releasable) == (NodeClass.REBIND_POSSIBLE, (), True)


def test_a_released_record_holding_evidence_the_pod_cannot_read_is_rebound_by_the_pod():
    """The plan called a released record holding evidence the pod cannot read ``needs_release``
    (not releasable), when the release is exactly what hands it to the pod: the next enrollment
    re-binds it whatever the pod presents, and its evidence becomes the pod's."""
    plan = plan_hostdatadir_migration(
        [
            MigrationNode(
                name=NodeName("n1"),
                records=(monitor("a-1", released=True, has_identity_evidence=True),),
                host_identity_readable=False,
            )
        ]
    )
    (row,) = plan.rows
    assert (row.node_class, row.reasons, row.releasable) == (NodeClass.REBIND_POSSIBLE, (), True)
    assert "evidence becomes the pod's" in row.action
