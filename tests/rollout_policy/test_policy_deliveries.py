"""Late and repeated results (rollout_policy.deliveries), as sentences."""

from datetime import UTC, datetime, timedelta

import pytest

from contracts.vocabulary import RolloutState, TargetStatus
from rollout_policy import ResultFate, is_overdue, result_fate

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("target", "rollout", "fate"),
    [
        (TargetStatus.DISPATCHED, RolloutState.RUNNING, ResultFate.APPLY),
        (TargetStatus.DISPATCHED, RolloutState.STALLED, ResultFate.APPLY),
        (TargetStatus.TIMED_OUT, RolloutState.RUNNING, ResultFate.APPLY),
        (TargetStatus.TIMED_OUT, RolloutState.STALLED, ResultFate.APPLY),
        (TargetStatus.TIMED_OUT, RolloutState.ABORTED, ResultFate.DUPLICATE),
        (TargetStatus.TIMED_OUT, RolloutState.SUCCEEDED, ResultFate.DUPLICATE),
        (TargetStatus.SUCCEEDED, RolloutState.RUNNING, ResultFate.DUPLICATE),
        (TargetStatus.FAILED, RolloutState.RUNNING, ResultFate.DUPLICATE),
        (TargetStatus.REJECTED, RolloutState.RUNNING, ResultFate.DUPLICATE),
        (TargetStatus.PENDING, RolloutState.RUNNING, ResultFate.NEVER_SENT),
    ],
)
def test_what_a_delivered_result_does(
    target: TargetStatus, rollout: RolloutState, fate: ResultFate
) -> None:
    assert result_fate(target, rollout) is fate


def test_silence_before_the_deadline_is_never_a_timeout() -> None:
    assert not is_overdue(
        deadline=T0,
        now=T0 - timedelta(seconds=1),
        listening_since=T0 - timedelta(days=1),
        grace_seconds=0,
    )


def test_silence_while_the_console_cannot_hear_is_never_a_timeout() -> None:
    assert not is_overdue(
        deadline=T0, now=T0 + timedelta(hours=1), listening_since=None, grace_seconds=0
    )


def test_silence_counts_once_the_console_has_listened_for_the_grace() -> None:
    back = T0 + timedelta(seconds=100)
    kwargs = {"deadline": T0, "listening_since": back, "grace_seconds": 30.0}
    assert not is_overdue(now=back + timedelta(seconds=29), **kwargs)  # type: ignore[arg-type]
    assert is_overdue(now=back + timedelta(seconds=30), **kwargs)  # type: ignore[arg-type]


def test_a_console_listening_all_along_times_out_at_the_deadline() -> None:
    assert is_overdue(
        deadline=T0, now=T0, listening_since=T0 - timedelta(hours=1), grace_seconds=60
    )


def test_a_negative_grace_is_a_bug() -> None:
    with pytest.raises(ValueError, match="grace_seconds"):
        is_overdue(deadline=T0, now=T0, listening_since=T0, grace_seconds=-1)
