"""Failure thresholds: per-type criteria, count and/or percent, min_executed, stall or abort."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollout_policy import (
    DEFAULT_THRESHOLD_POLICY,
    EventKind,
    FailureCriterion,
    FailureType,
    Measure,
    Outcome,
    ResultCounts,
    ThresholdAction,
    ThresholdPolicy,
    ThresholdPolicyError,
    evaluate_thresholds,
)

READ_ONLY_STORY = ThresholdPolicy(
    criteria=(
        FailureCriterion(failure_type=FailureType.FAILED, threshold_count=3, min_executed=5),
        FailureCriterion(failure_type=FailureType.TIMED_OUT, threshold_percent=20, min_executed=10),
        FailureCriterion(
            failure_type=FailureType.ANY,
            threshold_percent=50,
            min_executed=10,
            action=ThresholdAction.ABORT,
        ),
    )
)


def test_worked_example_nothing_trips_before_min_executed() -> None:
    """docs/rollout-policy.md, "Failure thresholds", example step 1: 3 failed out of 4 executed."""
    decision = evaluate_thresholds(READ_ONLY_STORY, ResultCounts(succeeded=1, failed=3))
    assert not decision.tripped
    assert decision.action is None
    assert decision.to_event() is None


def test_worked_example_the_count_criterion_stalls_once_five_have_executed() -> None:
    """Step 2: one more success makes 5 executed; 3 failed reaches the count of 3."""
    decision = evaluate_thresholds(READ_ONLY_STORY, ResultCounts(succeeded=2, failed=3))
    assert decision.action is ThresholdAction.STALL
    trip = decision.trip
    assert trip is not None
    assert (trip.criterion_index, trip.measure, trip.failures, trip.executed) == (
        0,
        Measure.COUNT,
        3,
        5,
    )
    assert trip.percent == 60.0
    assert decision.reason == (
        "failure threshold crossed: 3 failed of 5 executed (60.0%) reached threshold 3 "
        "(criterion: failed >= 3 after 5 executed -> stall)"
    )
    event = decision.to_event()
    assert event is not None
    assert event.kind is EventKind.STALL
    assert event.reason == decision.reason


def test_worked_example_abort_wins_when_several_criteria_trip() -> None:
    """Step 3: 12 executed, 4 failed + 3 timed out: all three criteria trip; abort decides."""
    decision = evaluate_thresholds(
        READ_ONLY_STORY, ResultCounts(succeeded=5, failed=4, timed_out=3)
    )
    assert [trip.criterion_index for trip in decision.trips] == [0, 1, 2]
    assert decision.action is ThresholdAction.ABORT
    assert decision.trip is not None
    assert decision.trip.criterion_index == 2
    assert decision.trip.measure is Measure.PERCENT
    event = decision.to_event()
    assert event is not None
    assert event.kind is EventKind.ABORT


def test_a_percentage_is_of_executed_results_and_inclusive() -> None:
    policy = ThresholdPolicy((FailureCriterion(threshold_percent=25),))
    assert evaluate_thresholds(policy, ResultCounts(succeeded=3, rejected=1)).tripped
    assert not evaluate_thresholds(policy, ResultCounts(succeeded=4, rejected=1)).tripped


def test_a_criterion_only_counts_its_own_failure_type() -> None:
    policy = ThresholdPolicy((FailureCriterion(FailureType.REJECTED, threshold_count=1),))
    assert not evaluate_thresholds(policy, ResultCounts(failed=5, timed_out=5)).tripped
    assert evaluate_thresholds(policy, ResultCounts(rejected=1)).tripped


def test_count_or_percent_whichever_comes_first() -> None:
    policy = ThresholdPolicy((FailureCriterion(threshold_count=10, threshold_percent=50),))
    by_percent = evaluate_thresholds(policy, ResultCounts(succeeded=1, failed=1)).trip
    by_count = evaluate_thresholds(policy, ResultCounts(succeeded=90, failed=10)).trip
    assert by_percent is not None
    assert by_percent.measure is Measure.PERCENT
    assert by_count is not None
    assert by_count.measure is Measure.COUNT


def test_a_resume_rearms_the_threshold_over_later_results() -> None:
    policy = ThresholdPolicy((FailureCriterion(threshold_count=3),))
    at_resume = ResultCounts(succeeded=10, failed=3)
    assert evaluate_thresholds(policy, at_resume).tripped
    later = at_resume.record(Outcome.SUCCEEDED, 5).record(Outcome.FAILED, 2)
    assert not evaluate_thresholds(policy, later, baseline=at_resume).tripped
    decision = evaluate_thresholds(policy, later.record(Outcome.FAILED), baseline=at_resume)
    assert decision.tripped
    assert decision.counts == ResultCounts(succeeded=5, failed=3)


def test_the_default_stalls_on_a_failing_canary() -> None:
    decision = evaluate_thresholds(DEFAULT_THRESHOLD_POLICY, ResultCounts(failed=1))
    assert decision.action is ThresholdAction.STALL
    assert not evaluate_thresholds(
        DEFAULT_THRESHOLD_POLICY, ResultCounts(succeeded=10, failed=1)
    ).tripped


def test_no_criteria_never_trips() -> None:
    assert not evaluate_thresholds(ThresholdPolicy(), ResultCounts(failed=100)).tripped


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "threshold_count"),
        ({"threshold_count": 0}, "threshold_count"),
        ({"threshold_percent": 0}, "threshold_percent"),
        ({"threshold_percent": 101}, "threshold_percent"),
        ({"threshold_percent": float("nan")}, "threshold_percent"),
        ({"threshold_count": 1, "min_executed": -1}, "min_executed"),
    ],
)
def test_a_criterion_that_cannot_work_is_refused(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ThresholdPolicyError) as caught:
        FailureCriterion(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_counts_cannot_go_negative() -> None:
    with pytest.raises(ValueError, match="failed"):
        ResultCounts(failed=2).since(ResultCounts(failed=3))


def test_counts_are_built_from_outcomes() -> None:
    outcomes = [Outcome.SUCCEEDED, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.SUCCEEDED]
    counts = ResultCounts.of(outcomes)
    assert counts == ResultCounts(succeeded=2, failed=1, timed_out=1)
    assert counts.executed == 4
    assert counts.failures(FailureType.ANY) == 2


@st.composite
def criteria(draw: st.DrawFn) -> FailureCriterion:
    count, percent = draw(
        st.one_of(
            st.tuples(st.integers(1, 50), st.none()),
            st.tuples(st.none(), st.floats(0.01, 100)),
            st.tuples(st.integers(1, 50), st.floats(0.01, 100)),
        )
    )
    return FailureCriterion(
        failure_type=draw(st.sampled_from(FailureType)),
        threshold_count=count,
        threshold_percent=percent,
        min_executed=draw(st.integers(0, 60)),
        action=draw(st.sampled_from(ThresholdAction)),
    )


counts = st.builds(
    ResultCounts,
    succeeded=st.integers(0, 80),
    failed=st.integers(0, 40),
    timed_out=st.integers(0, 40),
    rejected=st.integers(0, 40),
)
FAILURE_OUTCOMES = [Outcome.FAILED, Outcome.TIMED_OUT, Outcome.REJECTED]


@given(st.lists(criteria(), min_size=1, max_size=4), counts)
def test_nothing_trips_before_its_min_executed(
    chosen: list[FailureCriterion], result: ResultCounts
) -> None:
    decision = evaluate_thresholds(ThresholdPolicy(tuple(chosen)), result)
    for trip in decision.trips:
        assert result.executed >= trip.criterion.min_executed
    assert all(trip.criterion_index in range(len(chosen)) for trip in decision.trips)


@given(criteria(), counts, st.sampled_from(FAILURE_OUTCOMES), st.integers(1, 20))
def test_more_failures_of_a_criterions_type_never_untrip_it(
    criterion: FailureCriterion, result: ResultCounts, outcome: Outcome, extra: int
) -> None:
    if criterion.failure_type is not FailureType.ANY:
        outcome = Outcome(criterion.failure_type.value)
    policy = ThresholdPolicy((criterion,))
    if evaluate_thresholds(policy, result).tripped:
        assert evaluate_thresholds(policy, result.record(outcome, extra)).tripped


@given(criteria(), counts)
def test_a_trip_reports_the_numbers_it_crossed_on(
    criterion: FailureCriterion, result: ResultCounts
) -> None:
    decision = evaluate_thresholds(ThresholdPolicy((criterion,)), result)
    for trip in decision.trips:
        assert trip.executed == result.executed
        assert trip.failures == result.failures(criterion.failure_type)
        if trip.measure is Measure.COUNT:
            assert criterion.threshold_count is not None
            assert trip.failures >= criterion.threshold_count
        else:
            assert criterion.threshold_percent is not None
            assert trip.percent >= criterion.threshold_percent - 1e-9
