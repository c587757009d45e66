"""Eligibility: scope by selector, exclusions with named reasons, deterministic order."""

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_policy import (
    AgentId,
    AgentSnapshot,
    DuplicateAgentError,
    EnvironmentId,
    ExclusionReason,
    Selector,
    VersionError,
    evaluate_eligibility,
    parse_version_range,
)

PROD = EnvironmentId("prod")


def agent(agent_id: str, **overrides: object) -> AgentSnapshot:
    fields: dict[str, object] = {
        "agent_id": AgentId(agent_id),
        "environment_id": PROD,
        "agent_type": "host",
        "version": "0.8.0",
        "online": True,
        "labels": {"cluster": "production-rke2"},
    }
    fields.update(overrides)
    return AgentSnapshot(**fields)  # type: ignore[arg-type]


def test_the_worked_example_from_the_docs() -> None:
    """The fleet in docs/rollout-policy.md, "Eligibility", rolled to 0.9.0."""
    fleet = [
        agent("h-01"),
        agent("h-02"),
        agent("h-03", online=False),
        agent("h-04", version="0.9.0"),
        agent("h-05", revoked=True, online=False),
        agent(
            "h-06",
            shared_identity=True,
            can_self_update=False,
            self_update_blocker="read-only program path",
        ),
        agent(
            "n-01",
            agent_type="k8s-node-monitor",
            can_self_update=False,
            self_update_blocker="runs from a container image",
        ),
        agent("h-07", version="0.6.3"),
        agent("s-01", environment_id=EnvironmentId("staging")),
        agent("h-08", labels={"cluster": "edge"}),
        agent("h-09", version="dev-build"),
    ]
    selector = Selector(
        environment_id=PROD,
        agent_types=frozenset({"host", "k8s-node-monitor"}),
        labels={"cluster": "production-rke2"},
        version_range=parse_version_range(">=0.7.0,<1.0.0"),
    )
    report = evaluate_eligibility(selector, fleet, "0.9.0")

    assert report.eligible == ("h-01", "h-02")
    assert [(e.agent_id, e.reason) for e in report.excluded] == [
        ("h-03", ExclusionReason.OFFLINE),
        ("h-04", ExclusionReason.ALREADY_AT_TARGET),
        ("h-05", ExclusionReason.REVOKED),
        ("h-06", ExclusionReason.SHARED_IDENTITY),
        ("h-09", ExclusionReason.UNKNOWN_VERSION),
        ("n-01", ExclusionReason.CANNOT_SELF_UPDATE),
    ]
    by_id = {e.agent_id: e for e in report.excluded}
    assert by_id[AgentId("h-05")].reasons == (ExclusionReason.REVOKED, ExclusionReason.OFFLINE)
    assert by_id[AgentId("h-06")].reasons == (
        ExclusionReason.SHARED_IDENTITY,
        ExclusionReason.CANNOT_SELF_UPDATE,
    )
    assert by_id[AgentId("n-01")].detail == "runs from a container image"
    assert by_id[AgentId("h-04")].detail == "already at 0.9.0"
    # h-07 (below the range), s-01 (other environment), h-08 (other cluster)
    assert report.out_of_scope_count == 3
    assert report.in_scope_count == 8
    assert report.count_by_reason() == {
        ExclusionReason.REVOKED: 1,
        ExclusionReason.SHARED_IDENTITY: 1,
        ExclusionReason.CANNOT_SELF_UPDATE: 1,
        ExclusionReason.UNKNOWN_VERSION: 1,
        ExclusionReason.ALREADY_AT_TARGET: 1,
        ExclusionReason.OFFLINE: 1,
    }


def test_a_pod_declaring_it_can_self_update_is_still_excluded() -> None:
    """Kubernetes agents run from an image: helm upgrades them, a rollout would only fail them."""
    report = evaluate_eligibility(
        Selector(environment_id=PROD),
        [agent("c-01", agent_type="k8s-cluster-collector", can_self_update=True)],
        "0.9.0",
    )
    (exclusion,) = report.excluded
    assert exclusion.reason is ExclusionReason.CANNOT_SELF_UPDATE
    assert "helm upgrade" in exclusion.detail


def test_newer_agents_are_left_alone_unless_a_downgrade_is_allowed() -> None:
    fleet = [agent("h-01", version="1.0.0")]
    selector = Selector(environment_id=PROD)
    (exclusion,) = evaluate_eligibility(selector, fleet, "0.9.0").excluded
    assert exclusion.reason is ExclusionReason.NEWER_THAN_TARGET
    assert evaluate_eligibility(selector, fleet, "0.9.0", allow_downgrade=True).eligible == (
        "h-01",
    )


def test_build_metadata_does_not_make_an_agent_out_of_date() -> None:
    report = evaluate_eligibility(
        Selector(environment_id=PROD), [agent("h-01", version="0.9.0+abc")], "0.9.0+def"
    )
    assert report.excluded[0].reason is ExclusionReason.ALREADY_AT_TARGET


def test_explicit_agent_ids_narrow_the_scope() -> None:
    report = evaluate_eligibility(
        Selector(environment_id=PROD, agent_ids=frozenset({AgentId("h-02")})),
        [agent("h-01"), agent("h-02")],
        "0.9.0",
    )
    assert report.eligible == ("h-02",)
    assert report.out_of_scope_count == 1


def test_an_agent_listed_twice_is_refused() -> None:
    with pytest.raises(DuplicateAgentError) as caught:
        evaluate_eligibility(Selector(environment_id=PROD), [agent("h-01")] * 2, "0.9.0")
    assert caught.value.agent_id == "h-01"


def test_an_unparseable_target_is_refused() -> None:
    with pytest.raises(VersionError):
        evaluate_eligibility(Selector(environment_id=PROD), [], "next")


snapshots = st.builds(
    AgentSnapshot,
    agent_id=st.just(AgentId("")),
    environment_id=st.sampled_from([PROD, EnvironmentId("staging")]),
    agent_type=st.sampled_from(["host", "k8s-node-monitor", "k8s-cluster-collector"]),
    version=st.one_of(st.none(), st.sampled_from(["0.7.0", "0.8.0", "0.9.0", "1.0.0", "x"])),
    online=st.booleans(),
    labels=st.dictionaries(st.sampled_from(["cluster", "role"]), st.sampled_from(["a", "b"])),
    revoked=st.booleans(),
    shared_identity=st.booleans(),
    can_self_update=st.booleans(),
)
fleets = st.lists(snapshots, max_size=30).map(
    lambda agents: [
        dataclasses.replace(a, agent_id=AgentId(f"a-{i:03}")) for i, a in enumerate(agents)
    ]
)
selectors = st.builds(
    Selector,
    environment_id=st.just(PROD),
    agent_types=st.frozensets(st.sampled_from(["host", "k8s-node-monitor"])),
    labels=st.dictionaries(
        st.sampled_from(["cluster", "role"]), st.sampled_from(["a", "b"]), max_size=1
    ),
    version_range=st.sampled_from(["", ">=0.8.0", "<1.0.0,>=0.7.0"]).map(parse_version_range),
)


@settings(deadline=None)
@given(selectors, fleets)
def test_every_agent_is_eligible_excluded_or_out_of_scope_exactly_once(
    selector: Selector, fleet: list[AgentSnapshot]
) -> None:
    report = evaluate_eligibility(selector, fleet, "0.9.0")
    excluded = [e.agent_id for e in report.excluded]
    assert not set(report.eligible) & set(excluded)
    assert len(report.eligible) + len(excluded) + report.out_of_scope_count == len(fleet)
    assert list(report.eligible) == sorted(report.eligible)
    assert excluded == sorted(excluded)
    for exclusion in report.excluded:
        assert exclusion.reasons[0] is exclusion.reason
        assert list(exclusion.reasons) == sorted(exclusion.reasons, key=list(ExclusionReason).index)
    by_id = {a.agent_id: a for a in fleet}
    for agent_id in report.eligible:
        chosen = by_id[agent_id]
        assert chosen.online and not chosen.revoked and not chosen.shared_identity
        assert chosen.can_self_update and chosen.agent_type == "host"
        assert chosen.version in ("0.7.0", "0.8.0")


@settings(deadline=None)
@given(selectors, fleets, st.randoms(use_true_random=False))
def test_the_report_does_not_depend_on_input_order(
    selector: Selector, fleet: list[AgentSnapshot], rnd: random.Random
) -> None:
    shuffled = list(fleet)
    rnd.shuffle(shuffled)
    assert evaluate_eligibility(selector, shuffled, "0.9.0") == evaluate_eligibility(
        selector, fleet, "0.9.0"
    )
