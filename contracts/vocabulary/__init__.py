"""The shared vocabulary: every enum another process reads, and the reason codes of every
error body. Stdlib only, so the pure core (``rollout_policy``) may import it; the pydantic shapes
in the rest of ``contracts`` are built on it.

- :mod:`~contracts.vocabulary.agents`: agent types, the status and flags the Console computes;
- :mod:`~contracts.vocabulary.rollouts`: rollout states, target statuses, failure types, threshold
  actions and the one default rollout policy's numbers;
- :mod:`~contracts.vocabulary.commands`: command kinds, statuses and failure kinds;
- :mod:`~contracts.vocabulary.identities`: what release-identity and an enrollment do with a
  record;
- :mod:`~contracts.vocabulary.inventory`: what kind of problem an inventory sync reports;
- :mod:`~contracts.vocabulary.scopes`: :class:`Scope`, what an API token may do;
- :mod:`~contracts.vocabulary.messages`: agent messages the Console drops, and why;
- :mod:`~contracts.vocabulary.reasons`: :class:`ErrorReason`, every ``reason`` the system answers.
"""

from contracts.vocabulary.agents import AgentFlag, AgentStatus, AgentType
from contracts.vocabulary.commands import (
    CommandFailureKind,
    CommandKind,
    CommandStatus,
    ResultAckOutcome,
)
from contracts.vocabulary.identities import EnrollmentAction, RebindHow, ReleaseOutcome
from contracts.vocabulary.inventory import InventoryProblemKind
from contracts.vocabulary.messages import MessageKind, RejectionReason
from contracts.vocabulary.reasons import ErrorReason
from contracts.vocabulary.rollouts import (
    DriverLostReason,
    FailureType,
    RolloutState,
    TargetStatus,
    ThresholdAction,
)
from contracts.vocabulary.scopes import Scope

__all__ = [
    "AgentFlag",
    "AgentStatus",
    "AgentType",
    "CommandFailureKind",
    "CommandKind",
    "CommandStatus",
    "DriverLostReason",
    "EnrollmentAction",
    "ErrorReason",
    "FailureType",
    "InventoryProblemKind",
    "MessageKind",
    "RebindHow",
    "RejectionReason",
    "ReleaseOutcome",
    "ResultAckOutcome",
    "RolloutState",
    "Scope",
    "TargetStatus",
    "ThresholdAction",
]
