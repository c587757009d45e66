"""Failure thresholds with the semantics of AWS IoT Jobs' abort configuration.

A policy is a list of criteria. Each criterion names a failure type (``failed``, ``timed_out``,
``rejected`` or ``any``), an absolute count and/or a percentage of executed results, and the
minimum number of executed results before it is looked at. Each criterion is its own trigger:
the first to cross decides, and if several cross, ``abort`` wins over ``stall``.

A criterion with both a count and a percentage trips when *either* is reached. The percentage is
of executed results (succeeded + failed + timed out + rejected), not of the fleet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from contracts.vocabulary.rollouts import DEFAULT_MIN_EXECUTED, FailureType, ThresholdAction
from rollout_policy.errors import ThresholdPolicyError
from rollout_policy.states import RolloutEvent


class Outcome(StrEnum):
    """One agent's result for the rollout."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    REJECTED = "rejected"


class Measure(StrEnum):
    COUNT = "count"
    PERCENT = "percent"


@dataclass(frozen=True)
class ResultCounts:
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    rejected: int = 0

    def __post_init__(self) -> None:
        for name in ("succeeded", "failed", "timed_out", "rejected"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")

    @property
    def executed(self) -> int:
        return self.succeeded + self.failed + self.timed_out + self.rejected

    def failures(self, failure_type: FailureType) -> int:
        match failure_type:
            case FailureType.FAILED:
                return self.failed
            case FailureType.TIMED_OUT:
                return self.timed_out
            case FailureType.REJECTED:
                return self.rejected
            case FailureType.ANY:
                return self.failed + self.timed_out + self.rejected

    def record(self, outcome: Outcome, count: int = 1) -> ResultCounts:
        """These counts with ``count`` more results of ``outcome``."""
        field_name = outcome.value
        values = {
            "succeeded": self.succeeded,
            "failed": self.failed,
            "timed_out": self.timed_out,
            "rejected": self.rejected,
        }
        values[field_name] += count
        return ResultCounts(**values)

    def since(self, baseline: ResultCounts) -> ResultCounts:
        """The results that arrived after ``baseline`` was taken (for a resumed rollout)."""
        return ResultCounts(
            succeeded=self.succeeded - baseline.succeeded,
            failed=self.failed - baseline.failed,
            timed_out=self.timed_out - baseline.timed_out,
            rejected=self.rejected - baseline.rejected,
        )

    @classmethod
    def of(cls, outcomes: Iterable[Outcome]) -> ResultCounts:
        counts = cls()
        for outcome in outcomes:
            counts = counts.record(outcome)
        return counts


@dataclass(frozen=True)
class FailureCriterion:
    """Trips when failures of ``failure_type`` reach ``threshold_count``, or reach
    ``threshold_percent`` of executed results, once at least ``min_executed`` have executed."""

    failure_type: FailureType = FailureType.ANY
    threshold_count: int | None = None
    threshold_percent: float | None = None
    min_executed: int = DEFAULT_MIN_EXECUTED
    action: ThresholdAction = ThresholdAction.STALL

    def __post_init__(self) -> None:
        if self.threshold_count is None and self.threshold_percent is None:
            raise ThresholdPolicyError(
                "threshold_count", None, "set threshold_count, threshold_percent or both"
            )
        if self.threshold_count is not None and self.threshold_count < 1:
            raise ThresholdPolicyError(
                "threshold_count", self.threshold_count, "must be at least 1"
            )
        if self.threshold_percent is not None and not (
            math.isfinite(self.threshold_percent) and 0 < self.threshold_percent <= 100
        ):
            raise ThresholdPolicyError(
                "threshold_percent", self.threshold_percent, "must be in (0, 100]"
            )
        if self.min_executed < 0:
            raise ThresholdPolicyError("min_executed", self.min_executed, "must not be negative")

    def describe(self) -> str:
        limits = []
        if self.threshold_count is not None:
            limits.append(f"{self.threshold_count}")
        if self.threshold_percent is not None:
            limits.append(f"{self.threshold_percent:g}%")
        text = f"{self.failure_type.value} >= {' or '.join(limits)}"
        if self.min_executed:
            text += f" after {self.min_executed} executed"
        return f"{text} -> {self.action.value}"


@dataclass(frozen=True)
class ThresholdPolicy:
    """No criteria: the rollout never stops itself."""

    criteria: tuple[FailureCriterion, ...] = ()


_FAILURE_WORDS = {
    FailureType.FAILED: "failed",
    FailureType.TIMED_OUT: "timed out",
    FailureType.REJECTED: "rejected",
    FailureType.ANY: "failures",
}


@dataclass(frozen=True)
class Trip:
    """A criterion that crossed, with the numbers it crossed on."""

    criterion_index: int
    criterion: FailureCriterion
    measure: Measure
    failures: int
    executed: int

    @property
    def percent(self) -> float:
        return 100 * self.failures / self.executed if self.executed else 0.0

    def describe(self) -> str:
        criterion = self.criterion
        if self.measure is Measure.COUNT:
            limit = f"threshold {criterion.threshold_count}"
        else:
            limit = f"threshold {criterion.threshold_percent:g}%"
        kind = _FAILURE_WORDS[criterion.failure_type]
        return (
            f"{self.failures} {kind} of {self.executed} executed "
            f"({self.percent:.1f}%) reached {limit} "
            f"(criterion: {criterion.describe()})"
        )


@dataclass(frozen=True)
class ThresholdDecision:
    """``counts`` are the results the decision was made on (after any baseline)."""

    counts: ResultCounts
    trips: tuple[Trip, ...] = ()

    @property
    def tripped(self) -> bool:
        return bool(self.trips)

    @property
    def trip(self) -> Trip | None:
        """The trip that decides the action: the first abort, else the first stall."""
        for trip in self.trips:
            if trip.criterion.action is ThresholdAction.ABORT:
                return trip
        return self.trips[0] if self.trips else None

    @property
    def action(self) -> ThresholdAction | None:
        trip = self.trip
        return trip.criterion.action if trip else None

    @property
    def reason(self) -> str | None:
        trip = self.trip
        return f"failure threshold crossed: {trip.describe()}" if trip else None

    def to_event(self) -> RolloutEvent | None:
        """The rollout event this decision calls for: stall, abort, or ``None``."""
        trip = self.trip
        if trip is None:
            return None
        reason = f"failure threshold crossed: {trip.describe()}"
        if trip.criterion.action is ThresholdAction.ABORT:
            return RolloutEvent.abort(reason)
        return RolloutEvent.stall(reason)


def _check(index: int, criterion: FailureCriterion, counts: ResultCounts) -> Trip | None:
    executed = counts.executed
    if executed < criterion.min_executed:
        return None
    failures = counts.failures(criterion.failure_type)
    measure: Measure | None = None
    if criterion.threshold_count is not None and failures >= criterion.threshold_count:
        measure = Measure.COUNT
    elif (
        criterion.threshold_percent is not None
        and executed > 0
        and failures * 100 >= Fraction(str(criterion.threshold_percent)) * executed
    ):
        measure = Measure.PERCENT
    if measure is None:
        return None
    return Trip(
        criterion_index=index,
        criterion=criterion,
        measure=measure,
        failures=failures,
        executed=executed,
    )


def evaluate_thresholds(
    policy: ThresholdPolicy, counts: ResultCounts, *, baseline: ResultCounts | None = None
) -> ThresholdDecision:
    """Judge the rollout's results so far against ``policy``.

    ``baseline`` is the counts when an operator last resumed a stalled rollout: only results
    after it are judged, so a resume re-arms the threshold instead of tripping on the next result
    over the same failures.
    """
    window = counts.since(baseline) if baseline is not None else counts
    trips = tuple(
        trip
        for index, criterion in enumerate(policy.criteria)
        if (trip := _check(index, criterion, window)) is not None
    )
    return ThresholdDecision(counts=window, trips=trips)
