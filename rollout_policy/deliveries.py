"""Late and repeated command results: what a delivered result does to its rollout target, and
when a target's silence may be called ``timed_out``.

Results are delivered at least once (the agent retries until the Console acknowledges the
commit), so the same result can arrive again, and a result can arrive after its wave's
deadline when the Console or its database was down. The rules:

1. A result for a ``dispatched`` target is applied.
2. A result for a ``timed_out`` target is applied too (a late result wins: ``timed_out`` was
   only a guess), while the rollout is not finished; afterwards the history stays as it was.
3. A result for a target that already has a result is a duplicate: acknowledged, not applied.
4. A result for a target never dispatched (``pending``) is refused: nothing was sent.
5. A dispatched target is overdue only when its deadline has passed **and** the Console has
   been listening (NATS connected, database writable) for ``grace_seconds`` without a break:
   an agent holding a result retries within its backoff, so silence is only evidence once the
   Console could have heard it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from contracts.vocabulary.rollouts import RolloutState, TargetStatus
from rollout_policy.states import TERMINAL_STATES

__all__ = ["DEFAULT_RESULT_GRACE_SECONDS", "ResultFate", "is_overdue", "result_fate"]

DEFAULT_RESULT_GRACE_SECONDS = 60.0
"""Twice the agent's longest result retry backoff (30 s)."""


class ResultFate(StrEnum):
    APPLY = "apply"
    DUPLICATE = "duplicate"
    NEVER_SENT = "never_sent"


def result_fate(target: TargetStatus, rollout: RolloutState) -> ResultFate:
    """What a delivered result does to a target in ``target`` status (rules 1-4)."""
    if target is TargetStatus.PENDING:
        return ResultFate.NEVER_SENT
    if target is TargetStatus.DISPATCHED:
        return ResultFate.APPLY
    if target is TargetStatus.TIMED_OUT and rollout not in TERMINAL_STATES:
        return ResultFate.APPLY
    return ResultFate.DUPLICATE


def is_overdue(
    *,
    deadline: datetime,
    now: datetime,
    listening_since: datetime | None,
    grace_seconds: float,
) -> bool:
    """Whether a dispatched target past ``deadline`` may become ``timed_out`` (rule 5).
    ``listening_since`` is ``None`` while the Console cannot hear results."""
    if grace_seconds < 0:
        raise ValueError(f"grace_seconds must be >= 0, not {grace_seconds}")
    if now < deadline or listening_since is None:
        return False
    return (now - listening_since).total_seconds() >= grace_seconds
