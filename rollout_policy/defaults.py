"""The one default rollout policy: what a rollout gets when its request leaves a part out.

The numbers live in :mod:`contracts.vocabulary.rollouts` (stdlib only), because the API's request
shapes (``contracts.rollouts``) must default to them and ``contracts`` may not import this
package; here they become the policy objects the decisions take. Every caller that needs a
default (the Console's rollout service and web form, the flows) asks this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.vocabulary.rollouts import (
    DEFAULT_CANARY_SIZE,
    DEFAULT_FAILURE_TYPE,
    DEFAULT_MIN_EXECUTED,
    DEFAULT_THRESHOLD_ACTION,
    DEFAULT_THRESHOLD_PERCENT,
    DEFAULT_WAVE_PERCENTAGES,
    DEFAULT_WAVE_TIMEOUT_SECONDS,
)
from rollout_policy.thresholds import FailureCriterion, ThresholdPolicy
from rollout_policy.waves import PercentGrowth, WavePolicy

__all__ = [
    "DEFAULT_CANARY_SIZE",
    "DEFAULT_CRITERION",
    "DEFAULT_MIN_EXECUTED",
    "DEFAULT_ROLLOUT_POLICY",
    "DEFAULT_THRESHOLD_POLICY",
    "DEFAULT_WAVE_PERCENTAGES",
    "DEFAULT_WAVE_POLICY",
    "DEFAULT_WAVE_TIMEOUT_SECONDS",
    "RolloutPolicy",
]

DEFAULT_CRITERION = FailureCriterion(
    failure_type=DEFAULT_FAILURE_TYPE,
    threshold_percent=DEFAULT_THRESHOLD_PERCENT,
    min_executed=DEFAULT_MIN_EXECUTED,
    action=DEFAULT_THRESHOLD_ACTION,
)
"""Stall once 10 % of executed results are failures of any kind: a failing canary stalls."""

DEFAULT_THRESHOLD_POLICY = ThresholdPolicy(criteria=(DEFAULT_CRITERION,))

DEFAULT_WAVE_POLICY = WavePolicy(
    canary_size=DEFAULT_CANARY_SIZE, growth=PercentGrowth(DEFAULT_WAVE_PERCENTAGES)
)
"""One canary, then 1 %, 10 %, 50 % and 100 % of the eligible set."""


@dataclass(frozen=True)
class RolloutPolicy:
    """How a rollout proceeds: its waves, the criteria that stop it, how long a wave may take."""

    waves: WavePolicy = field(default_factory=lambda: DEFAULT_WAVE_POLICY)
    thresholds: ThresholdPolicy = field(default_factory=lambda: DEFAULT_THRESHOLD_POLICY)
    wave_timeout_seconds: float = DEFAULT_WAVE_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not self.wave_timeout_seconds > 0:
            raise ValueError(
                f"wave_timeout_seconds must be positive, got {self.wave_timeout_seconds}"
            )


DEFAULT_ROLLOUT_POLICY = RolloutPolicy()
