"""The identity rules: enroll / same identity / re-bind / refuse, release, online, quiet."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from contracts.vocabulary import AgentStatus, AgentType, ErrorReason, ReleaseOutcome
from rollout_policy import (
    DEFAULT_QUIET_WINDOW_SECONDS,
    DEFAULT_STALE_AFTER_SECONDS,
    AgentId,
    EnrollmentAction,
    EnrollmentClaim,
    HeldRecord,
    RebindHow,
    agent_status,
    decide_enrollment,
    decide_release,
    evidence_matches,
    is_online,
    is_quiet,
    token_may_enroll,
)

WINDOW = DEFAULT_QUIET_WINDOW_SECONDS
MACHINE = ("machine_id", "h-1")
OTHER = ("machine_id", "h-2")


def held(**overrides: object) -> HeldRecord:
    fields: dict[str, object] = {
        "agent_id": AgentId("a-1"),
        "public_key": "UOLD",
        "revoked": False,
        "seconds_since_seen": WINDOW + 1,
        "evidence": frozenset({MACHINE}),
    }
    fields.update(overrides)
    return HeldRecord(**fields)  # type: ignore[arg-type]


def claim(*signals: tuple[str, str], key: str = "UNEW") -> EnrollmentClaim:
    return EnrollmentClaim(public_key=key, signals=frozenset(signals))


def test_the_defaults_are_the_chart_pages_five_minutes_and_the_consoles_stale_timeout() -> None:
    assert DEFAULT_QUIET_WINDOW_SECONDS == 300.0
    assert DEFAULT_STALE_AFTER_SECONDS == 70.0


def test_quiet_means_more_than_the_window_and_no_sign_of_life_is_quiet() -> None:
    assert not is_quiet(300.0, 300.0)
    assert is_quiet(300.001, 300.0)
    assert is_quiet(None, 300.0)
    with pytest.raises(ValueError, match="quiet_window_seconds"):
        is_quiet(1.0, -1.0)


def test_online_is_a_live_identity_seen_within_the_stale_timeout_boundary_included() -> None:
    assert is_online(90.0, stale_after_seconds=90.0)
    assert not is_online(90.1, stale_after_seconds=90.0)
    assert not is_online(None, stale_after_seconds=90.0)
    assert not is_online(1.0, stale_after_seconds=90.0, revoked=True)
    assert not is_online(1.0, stale_after_seconds=90.0, holds_identity=False)


def test_status_is_revoked_then_released_then_online_or_offline() -> None:
    def status(since: float | None, *, revoked: bool = False, holds: bool = True) -> AgentStatus:
        return agent_status(since, stale_after_seconds=90, revoked=revoked, holds_identity=holds)

    assert status(1, revoked=True, holds=False) is AgentStatus.REVOKED
    assert status(1, holds=False) is AgentStatus.RELEASED
    assert status(1) is AgentStatus.ONLINE
    assert status(91) is AgentStatus.OFFLINE
    assert status(None) is AgentStatus.OFFLINE


@pytest.mark.parametrize(
    ("record", "presented", "action", "how", "refusal"),
    [
        (None, claim(MACHINE), EnrollmentAction.CREATE, None, None),
        (held(public_key="UNEW"), claim(), EnrollmentAction.SAME_IDENTITY, None, None),
        (
            held(public_key="UNEW", revoked=True),
            claim(MACHINE),
            EnrollmentAction.REFUSE,
            None,
            ErrorReason.AGENT_REVOKED,
        ),
        (
            held(public_key=None),
            claim(MACHINE),
            EnrollmentAction.REBIND,
            RebindHow.RELEASED,
            None,
        ),
        (
            held(public_key=None, evidence=frozenset()),
            claim(),
            EnrollmentAction.REBIND,
            RebindHow.RELEASED,
            None,
        ),
        (
            held(public_key=None),
            claim(),
            EnrollmentAction.REBIND,
            RebindHow.RELEASED,
            None,
        ),
        (
            held(seconds_since_seen=WINDOW),
            claim(MACHINE),
            EnrollmentAction.REFUSE,
            None,
            ErrorReason.NAME_IN_USE,
        ),
        (
            held(evidence=frozenset()),
            claim(MACHINE),
            EnrollmentAction.REFUSE,
            None,
            ErrorReason.NO_IDENTITY_EVIDENCE,
        ),
        (
            held(),
            claim(OTHER),
            EnrollmentAction.REFUSE,
            None,
            ErrorReason.IDENTITY_MISMATCH,
        ),
        (
            held(),
            claim(MACHINE, OTHER),
            EnrollmentAction.REBIND,
            RebindHow.QUIET_WITH_EVIDENCE,
            None,
        ),
    ],
)
def test_the_enrollment_rules_in_their_order(
    record: HeldRecord | None,
    presented: EnrollmentClaim,
    action: EnrollmentAction,
    how: RebindHow | None,
    refusal: ErrorReason | None,
) -> None:
    decision = decide_enrollment(record, presented, quiet_window_seconds=WINDOW)
    assert (decision.action, decision.how, decision.refusal) == (action, how, refusal)
    if record is not None:
        assert decision.agent_id == record.agent_id


def test_a_quiet_rebind_retires_the_old_key_and_a_rebind_after_release_retires_none() -> None:
    quiet = decide_enrollment(held(), claim(MACHINE), quiet_window_seconds=WINDOW)
    assert quiet.retire_key == "UOLD"
    released = decide_enrollment(held(public_key=None), claim(MACHINE), quiet_window_seconds=WINDOW)
    assert released.retire_key is None


@pytest.mark.parametrize(
    ("record", "outcome", "refusal"),
    [
        (held(revoked=True), ReleaseOutcome.REFUSED, ErrorReason.AGENT_REVOKED),
        (held(revoked=True, public_key=None), ReleaseOutcome.REFUSED, ErrorReason.AGENT_REVOKED),
        (held(public_key=None, seconds_since_seen=1), ReleaseOutcome.ALREADY_RELEASED, None),
        (held(seconds_since_seen=WINDOW), ReleaseOutcome.REFUSED, ErrorReason.AGENT_RECENTLY_SEEN),
        (held(seconds_since_seen=WINDOW + 0.5), ReleaseOutcome.WOULD_RELEASE, None),
        (held(seconds_since_seen=None), ReleaseOutcome.WOULD_RELEASE, None),
    ],
)
def test_the_release_rules(
    record: HeldRecord, outcome: ReleaseOutcome, refusal: ErrorReason | None
) -> None:
    decision = decide_release(record, quiet_window_seconds=WINDOW)
    assert (decision.outcome, decision.refusal) == (outcome, refusal)
    assert decision.releases is (outcome is ReleaseOutcome.WOULD_RELEASE)


# --- properties ---------------------------------------------------------------------------------

signals = st.frozensets(
    st.tuples(st.sampled_from(["machine_id", "product_uuid"]), st.sampled_from("abc")), max_size=4
)
ages = st.none() | st.floats(min_value=0, max_value=10_000, allow_nan=False)
windows = st.floats(min_value=0, max_value=5_000, allow_nan=False)
records = st.builds(
    HeldRecord,
    agent_id=st.just(AgentId("a-1")),
    public_key=st.none() | st.sampled_from(["UOLD", "UNEW"]),
    revoked=st.booleans(),
    seconds_since_seen=ages,
    evidence=signals,
)
claims = st.builds(
    EnrollmentClaim,
    public_key=st.sampled_from(["UOLD", "UNEW"]),
    signals=signals,
    agent_type=st.none() | st.sampled_from(list(AgentType)),
    cluster_bound_token=st.booleans(),
)


@given(records, claims, windows)
def test_a_revoked_record_is_never_rebound_nor_released(
    record: HeldRecord, presented: EnrollmentClaim, window: float
) -> None:
    if record.revoked:
        decision = decide_enrollment(record, presented, quiet_window_seconds=window)
        assert decision.action is EnrollmentAction.REFUSE
        assert decision.refusal in (ErrorReason.AGENT_REVOKED, ErrorReason.INSTALL_TOKEN_SCOPE)
        assert decide_release(record, quiet_window_seconds=window).outcome is (
            ReleaseOutcome.REFUSED
        )


@given(records, claims, windows)
def test_a_live_identity_is_never_taken_over_by_another_key(
    record: HeldRecord, presented: EnrollmentClaim, window: float
) -> None:
    """A record holding another key and seen within the window is never re-bound or freed."""
    if record.public_key not in (None, presented.public_key) and not is_quiet(
        record.seconds_since_seen, window
    ):
        decision = decide_enrollment(record, presented, quiet_window_seconds=window)
        assert decision.action is EnrollmentAction.REFUSE
        assert not decide_release(record, quiet_window_seconds=window).releases


@given(records, claims, windows)
def test_a_quiet_rebind_needs_every_kind_of_evidence_the_record_carries(
    record: HeldRecord, presented: EnrollmentClaim, window: float
) -> None:
    """Without a release, the strict rule: quiet, not revoked, every kind of evidence matched,
    and the record gains the presented evidence rather than losing its own."""
    decision = decide_enrollment(record, presented, quiet_window_seconds=window)
    if decision.how is RebindHow.QUIET_WITH_EVIDENCE:
        assert evidence_matches(record.evidence, presented.signals)
        assert is_quiet(record.seconds_since_seen, window)
        assert not record.revoked and not decision.replaces_evidence
    assert (decision.refusal is None) == (decision.action is not EnrollmentAction.REFUSE)


@given(records, windows)
def test_what_release_frees_enrollment_would_rebind_after_the_release(
    record: HeldRecord, window: float
) -> None:
    """Release, then enroll with any key and no signals: the record is re-bound, keeping its id."""
    if decide_release(record, quiet_window_seconds=window).outcome is ReleaseOutcome.REFUSED:
        return
    after = HeldRecord(record.agent_id, None, record.revoked, record.seconds_since_seen)
    decision = decide_enrollment(after, claim(), quiet_window_seconds=window)
    assert (decision.action, decision.how) == (EnrollmentAction.REBIND, RebindHow.RELEASED)
    assert decision.agent_id == record.agent_id


@given(records, claims, windows)
def test_a_released_record_is_rebound_by_any_claim_and_takes_its_evidence(
    record: HeldRecord, presented: EnrollmentClaim, window: float
) -> None:
    """The release is the operator's override: evidence, quiet and key do not matter; only a
    revoked record and the token's scope still refuse."""
    decision = decide_enrollment(record, presented, quiet_window_seconds=window)
    if decision.how is RebindHow.RELEASED or decision.replaces_evidence:
        assert decision.how is RebindHow.RELEASED and decision.replaces_evidence
        assert record.released and decision.retire_key is None
    if record.released and not record.revoked and decision.refusal is None:
        assert decision.action is EnrollmentAction.REBIND and decision.replaces_evidence


@given(ages, st.floats(min_value=0, max_value=5_000, allow_nan=False), st.booleans(), st.booleans())
def test_online_agrees_with_the_status(
    since: float | None, stale: float, revoked: bool, holds: bool
) -> None:
    status = agent_status(since, stale_after_seconds=stale, revoked=revoked, holds_identity=holds)
    online = is_online(since, stale_after_seconds=stale, revoked=revoked, holds_identity=holds)
    assert online == (status is AgentStatus.ONLINE)


# --- re-bind evidence and token scope -----------------------------------------------------------

UUID = ("product_uuid", "u-1")


def test_a_machine_id_alone_does_not_rebind_a_record_that_holds_a_dmi_uuid() -> None:
    record = held(evidence=frozenset({MACHINE, UUID}))
    machine_only = decide_enrollment(record, claim(MACHINE), quiet_window_seconds=WINDOW)
    assert machine_only.refusal is ErrorReason.IDENTITY_MISMATCH
    both = decide_enrollment(record, claim(MACHINE, UUID), quiet_window_seconds=WINDOW)
    assert both.action is EnrollmentAction.REBIND


def test_after_release_a_machine_with_other_evidence_rebinds_and_replaces_the_evidence() -> None:
    """A released record holding evidence was re-bound only by a machine presenting that
    evidence, so a machine whose evidence changed got ``identity_mismatch`` for ever after the
    very release meant to hand it the name."""
    released = held(public_key=None, evidence=frozenset({MACHINE, UUID}))
    for presented in (claim(OTHER), claim(MACHINE), claim()):
        decision = decide_enrollment(released, presented, quiet_window_seconds=WINDOW)
        assert (decision.action, decision.how, decision.agent_id) == (
            EnrollmentAction.REBIND,
            RebindHow.RELEASED,
            released.agent_id,
        )
        assert decision.replaces_evidence and decision.retire_key is None
    # without the release the same machine is refused, however quiet the record
    unreleased = held(evidence=frozenset({MACHINE, UUID}), seconds_since_seen=None)
    refused = decide_enrollment(unreleased, claim(OTHER), quiet_window_seconds=WINDOW)
    assert refused.refusal is ErrorReason.IDENTITY_MISMATCH


def test_a_released_and_revoked_record_is_still_refused() -> None:
    record = held(public_key=None, revoked=True)
    assert decide_enrollment(record, claim(MACHINE), quiet_window_seconds=WINDOW).refusal is (
        ErrorReason.AGENT_REVOKED
    )


def test_a_record_may_hold_several_values_of_a_kind_and_one_of_them_suffices() -> None:
    record = held(evidence=frozenset({MACHINE, OTHER, UUID}))
    assert evidence_matches(record.evidence, frozenset({OTHER, UUID}))
    assert not evidence_matches(record.evidence, frozenset({MACHINE, OTHER}))
    assert not evidence_matches(frozenset(), frozenset({MACHINE}))


def test_a_cluster_bound_token_enrolls_only_kubernetes_agents() -> None:
    assert token_may_enroll(AgentType.HOST, cluster_bound=False)
    assert not token_may_enroll(AgentType.HOST, cluster_bound=True)
    assert not token_may_enroll(None, cluster_bound=True)
    assert token_may_enroll(AgentType.K8S_NODE_MONITOR, cluster_bound=True)
    assert token_may_enroll(AgentType.K8S_CLUSTER_COLLECTOR, cluster_bound=True)
    host_claim = EnrollmentClaim(
        public_key="UNEW",
        signals=frozenset({MACHINE}),
        agent_type=AgentType.HOST,
        cluster_bound_token=True,
    )
    for record in (None, held(), held(public_key=None)):
        decision = decide_enrollment(record, host_claim, quiet_window_seconds=WINDOW)
        assert decision.refusal is ErrorReason.INSTALL_TOKEN_SCOPE


@given(records, claims, windows)
def test_a_rebind_without_release_presents_every_kind_of_evidence_the_record_holds(
    record: HeldRecord, presented: EnrollmentClaim, window: float
) -> None:
    """Every re-bind but the one a release allows."""
    decision = decide_enrollment(record, presented, quiet_window_seconds=window)
    if decision.action is EnrollmentAction.REBIND and not record.released:
        for kind in {k for k, _ in record.evidence}:
            assert any(s in record.evidence for s in presented.signals if s[0] == kind)


@given(records, claims, windows)
def test_a_token_that_may_not_enroll_the_type_never_creates_nor_rebinds(
    record: HeldRecord, presented: EnrollmentClaim, window: float
) -> None:
    assume(not token_may_enroll(presented.agent_type, cluster_bound=presented.cluster_bound_token))
    decision = decide_enrollment(record, presented, quiet_window_seconds=window)
    assert decision.action is EnrollmentAction.REFUSE
    assert decision.refusal is ErrorReason.INSTALL_TOKEN_SCOPE
