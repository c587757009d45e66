"""The driver rule: which Prefect flow run states leave a rollout without a driver."""

import pytest

from contracts.vocabulary import DriverLostReason, RolloutState
from rollout_policy import LIVE_RUN_STATES, driver_lost, resume_owed


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        ("CRASHED", DriverLostReason.CRASHED),
        ("FAILED", DriverLostReason.FAILED),
        ("CANCELLED", DriverLostReason.CANCELLED),
        ("CANCELLING", DriverLostReason.CANCELLED),
        ("COMPLETED", DriverLostReason.ENDED),
        (None, DriverLostReason.VANISHED),
    ],
)
@pytest.mark.parametrize(
    "state", [RolloutState.PENDING, RolloutState.RUNNING, RolloutState.STALLED, RolloutState.PAUSED]
)
def test_a_dead_run_loses_an_unfinished_rollout(run, reason, state):
    assert driver_lost(state, run) is reason


@pytest.mark.parametrize("run", sorted(LIVE_RUN_STATES))
def test_a_live_run_is_a_driver(run):
    assert driver_lost(RolloutState.RUNNING, run) is None


@pytest.mark.parametrize(
    "state", [RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.ABORTED]
)
@pytest.mark.parametrize("run", ["CRASHED", None, "COMPLETED"])
def test_a_finished_rollout_needs_no_driver(state, run):
    assert driver_lost(state, run) is None


@pytest.mark.parametrize("state", list(RolloutState))
@pytest.mark.parametrize("run", [*sorted(LIVE_RUN_STATES), "paused", "CRASHED", "COMPLETED", None])
def test_only_a_run_paused_while_its_rollout_runs_is_owed_a_resume(state, run):
    """Paused while stalled or paused is waiting for a decision not taken yet; paused while
    running waits for one the Console already took (a resume that raced the pause)."""
    owed = state is RolloutState.RUNNING and run in ("PAUSED", "paused")
    assert resume_owed(state, run) is owed
