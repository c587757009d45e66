"""Whether a rollout still has a driver: its ``fleet-rollout`` flow run, as Prefect reports it.

The rule, in order:

1. a rollout that is finished (``succeeded``, ``failed``, ``aborted``) needs no driver;
2. a run Prefect does not know is ``vanished``;
3. a run in a final state lost its rollout: ``CRASHED`` → ``crashed``, ``FAILED`` → ``failed``,
   ``CANCELLED`` (or being cancelled) → ``cancelled``, ``COMPLETED`` → ``ended``;
4. any other state (scheduled, pending, running, paused) is a live driver.

And one decision the run may still be owed (:func:`resume_owed`): a run **paused** while its
rollout is **running** waits for a decision the Console already took. An operator's resume that
lands between the flow reading its rollout halted and the run pausing finds the run not paused
yet, so only the rollout resumes; the run then pauses and would wait for its whole decision
timeout (days) with nothing driving the rollout. The Console resumes such a run when it sees it.

Pure: the Console asks Prefect and passes the state type here (``RunState``'s names are
Prefect's ``StateType`` values, so the Console needs no Prefect import).
"""

from __future__ import annotations

from typing import Final

from contracts.vocabulary.rollouts import DriverLostReason, RolloutState

__all__ = ["LIVE_RUN_STATES", "PAUSED_RUN_STATE", "driver_lost", "resume_owed"]

_TERMINAL: Final = frozenset({RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.ABORTED})
_LOST: Final = {
    "CRASHED": DriverLostReason.CRASHED,
    "FAILED": DriverLostReason.FAILED,
    "CANCELLED": DriverLostReason.CANCELLED,
    "CANCELLING": DriverLostReason.CANCELLED,
    "COMPLETED": DriverLostReason.ENDED,
}
LIVE_RUN_STATES: Final = frozenset({"SCHEDULED", "PENDING", "RUNNING", "PAUSED"})
PAUSED_RUN_STATE: Final = "PAUSED"


def driver_lost(rollout_state: RolloutState, run_state_type: str | None) -> DriverLostReason | None:
    """Why the rollout has lost its driver, or None while it has one (or needs none).
    ``run_state_type`` is Prefect's state type of the run; None when Prefect does not know it."""
    if rollout_state in _TERMINAL:
        return None
    if run_state_type is None:
        return DriverLostReason.VANISHED
    return _LOST.get(run_state_type.upper())


def resume_owed(rollout_state: RolloutState, run_state_type: str | None) -> bool:
    """Whether the run waits for a resume already decided: it is paused (or suspended, whose
    type is ``PAUSED`` too) while its rollout is running."""
    return rollout_state is RolloutState.RUNNING and (run_state_type or "").upper() == (
        PAUSED_RUN_STATE
    )
