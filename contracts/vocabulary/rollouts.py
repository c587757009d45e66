"""Rollouts: states, target statuses, failure types, threshold actions, and the numbers of the
one default rollout policy (``rollout_policy.defaults`` builds the policy objects from them; the
API's request shapes default to them)."""

from enum import StrEnum
from typing import Final


class RolloutState(StrEnum):
    """The rollout state machine's states (``rollout_policy.states`` holds the transitions)."""

    PENDING = "pending"
    RUNNING = "running"
    STALLED = "stalled"
    PAUSED = "paused"
    ABORTED = "aborted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class DriverLostReason(StrEnum):
    """Why a rollout that is not finished has no ``fleet-rollout`` flow run driving it
    (``rollout_policy.drivers`` decides it from the run's state in Prefect)."""

    CRASHED = "crashed"
    """The flow run crashed (its process died, or its infrastructure failed)."""
    FAILED = "failed"
    """The flow run failed (an exception: e.g. a Console token without ``rollouts:read``)."""
    CANCELLED = "cancelled"
    """Someone cancelled the flow run in Prefect."""
    VANISHED = "vanished"
    """Prefect no longer knows the flow run (deleted, or another Prefect server)."""
    ENDED = "ended"
    """The flow run completed although the rollout still had work left."""


class TargetStatus(StrEnum):
    """One agent's place in a rollout."""

    PENDING = "pending"
    DISPATCHED = "dispatched"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    REJECTED = "rejected"

    @property
    def final(self) -> bool:
        return self not in (TargetStatus.PENDING, TargetStatus.DISPATCHED)


class FailureType(StrEnum):
    """Which failures a criterion counts; ``any`` is all three."""

    FAILED = "failed"
    TIMED_OUT = "timed_out"
    REJECTED = "rejected"
    ANY = "any"

    def includes(self, outcome: str) -> bool:
        """Whether a result ``outcome`` (``succeeded``, ``failed``, ``timed_out``,
        ``rejected``) is a failure of this type."""
        if outcome == "succeeded":
            return False
        return self is FailureType.ANY or self.value == outcome


class ThresholdAction(StrEnum):
    """What a crossed criterion does to the rollout."""

    STALL = "stall"
    ABORT = "abort"


# --- the one default rollout policy ------------------------------------------------------------

DEFAULT_CANARY_SIZE: Final = 1
DEFAULT_WAVE_PERCENTAGES: Final[tuple[float, ...]] = (1.0, 10.0, 50.0, 100.0)
"""Cumulative percent of the eligible set after each growth wave."""
DEFAULT_WAVE_TIMEOUT_SECONDS: Final = 300.0
DEFAULT_FAILURE_TYPE: Final = FailureType.ANY
DEFAULT_THRESHOLD_ACTION: Final = ThresholdAction.STALL
DEFAULT_THRESHOLD_PERCENT: Final = 10.0
"""The default criterion: stall once 10 % of executed results are failures of any kind."""
DEFAULT_MIN_EXECUTED: Final = 1
"""Results that must have executed before a criterion is looked at. 0 and 1 decide alike (no
criterion can trip on zero executed results); 1 is what the API and the web form show."""
