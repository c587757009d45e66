"""The one default rollout policy, and the API's request shapes defaulting to the same numbers."""

from contracts.rollouts import CriterionSpec, RolloutCreate, WaveSpec
from contracts.vocabulary import FailureType, ThresholdAction
from rollout_policy import (
    DEFAULT_CRITERION,
    DEFAULT_ROLLOUT_POLICY,
    DEFAULT_THRESHOLD_POLICY,
    DEFAULT_WAVE_POLICY,
    FailureCriterion,
    PercentGrowth,
    ResultCounts,
    RolloutPolicy,
    WavePolicy,
    evaluate_thresholds,
)


def test_the_default_policy_is_one_canary_then_1_10_50_100_and_a_10_percent_stall() -> None:
    assert DEFAULT_ROLLOUT_POLICY == RolloutPolicy()
    assert DEFAULT_ROLLOUT_POLICY.waves == DEFAULT_WAVE_POLICY == WavePolicy()
    assert DEFAULT_WAVE_POLICY.canary_size == 1
    assert DEFAULT_WAVE_POLICY.growth == PercentGrowth((1, 10, 50, 100))
    assert DEFAULT_ROLLOUT_POLICY.thresholds == DEFAULT_THRESHOLD_POLICY
    assert DEFAULT_THRESHOLD_POLICY.criteria == (DEFAULT_CRITERION,)
    assert DEFAULT_CRITERION == FailureCriterion(
        failure_type=FailureType.ANY,
        threshold_percent=10,
        min_executed=1,
        action=ThresholdAction.STALL,
    )
    assert DEFAULT_ROLLOUT_POLICY.wave_timeout_seconds == 300.0


def test_a_criterion_left_at_its_defaults_is_the_same_in_the_api_and_in_the_policy() -> None:
    spec = CriterionSpec(threshold_percent=10)
    assert FailureCriterion(threshold_percent=10) == FailureCriterion(
        failure_type=spec.failure_type,
        threshold_percent=spec.threshold_percent,
        min_executed=spec.min_executed,
        action=spec.action,
    )
    (default,) = RolloutCreate.model_fields["criteria"].get_default(call_default_factory=True)
    assert default.min_executed == DEFAULT_CRITERION.min_executed
    waves = WaveSpec()
    assert tuple(waves.percentages or ()) == DEFAULT_WAVE_POLICY.growth.steps  # type: ignore[union-attr]


def test_min_executed_0_and_1_decide_alike() -> None:
    """Why choosing 1 over 0 changed no decision: nothing trips on zero executed results."""
    for criterion in (
        FailureCriterion(threshold_count=1, min_executed=0),
        FailureCriterion(threshold_percent=0.1, min_executed=0),
    ):
        assert not evaluate_thresholds(
            DEFAULT_THRESHOLD_POLICY.__class__(criteria=(criterion,)), ResultCounts()
        ).tripped
