"""The kinds of event that move a rollout between states (``rollout_policy.states`` holds the
transitions). Apart from the state machine so that ``rollout_policy.errors`` can name them without
importing it: the errors sit below every other module of the package."""

from enum import StrEnum
from typing import Literal

__all__ = ["Decision", "EventKind"]


class EventKind(StrEnum):
    START = "start"
    STALL = "stall"
    PAUSE = "pause"
    RESUME = "resume"
    ABORT = "abort"
    COMPLETE = "complete"
    FAIL = "fail"


Decision = Literal[EventKind.RESUME, EventKind.ABORT]
"""What a halted rollout waits for from a person: the flow run's input when it pauses
(``flows.rollout.StallDecision``), what the Console resumes a paused run with."""
