"""The start-up decisions about an update marker and the probation verdict, as pure functions:
every phase against which build starts, with no files and no clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.selfupdate.failures import FailedStep
from agent.selfupdate.marker import Phase, UpdateMarker, new_marker
from agent.selfupdate.probation import Probation, StartAction, StartPlan, Verdict, plan_at_start

OLD, NEW, OTHER = "0.8.0", "0.9.0", "0.7.0"


def marker(phase: Phase, **changes: object) -> UpdateMarker:
    return new_marker(
        command_id="upd",
        rollout_id=None,
        old_version=OLD,
        new_version=NEW,
        program=Path("/opt/proxima-agent"),
        backup=Path("/opt/proxima-agent.bak"),
        health_timeout=5,
    ).with_(phase=phase, **changes)


def plan(
    m: UpdateMarker, version: str, *, concluded: bool = False, backup_exists: bool = True
) -> StartPlan:
    return plan_at_start(
        m, version=version, concluded=concluded, now=1000.0, backup_exists=backup_exists
    )


@pytest.mark.parametrize(
    ("phase", "version", "action", "step", "error"),
    [
        (
            Phase.INSTALLING,
            NEW,
            StartAction.ROLL_BACK,
            FailedStep.INTERRUPTED,
            "the agent stopped during the trial of 0.9.0; restored 0.8.0",
        ),
        (
            Phase.INSTALLING,
            OLD,
            StartAction.REPORT,
            FailedStep.INTERRUPTED,
            "the agent stopped while installing 0.9.0; still at 0.8.0",
        ),
        (
            Phase.INSTALLING,
            OTHER,
            StartAction.REPORT,
            FailedStep.INTERRUPTED,
            "the update to 0.9.0 was interrupted; this agent now runs 0.7.0 "
            "(expected 0.8.0 or 0.9.0)",
        ),
        (
            Phase.HANDOVER,
            OLD,
            StartAction.REPORT,
            FailedStep.INTERRUPTED,
            "new version 0.9.0 was replaced by 0.8.0 before it became healthy",
        ),
        (
            Phase.HANDOVER,
            OTHER,
            StartAction.REPORT,
            FailedStep.INTERRUPTED,
            "the update to 0.9.0 was interrupted; this agent now runs 0.7.0 "
            "(expected 0.8.0 or 0.9.0)",
        ),
        (
            Phase.ROLLED_BACK,
            OLD,
            StartAction.REPORT,
            FailedStep.HANDOVER,
            "the update to 0.9.0 was rolled back",
        ),
        (
            Phase.ROLLED_BACK,
            NEW,
            StartAction.ROLL_BACK,
            FailedStep.HANDOVER,
            "the update to 0.9.0 was rolled back",
        ),
    ],
)
def test_each_phase_and_build_gets_one_action_and_one_error(
    phase: Phase, version: str, action: StartAction, step: FailedStep, error: str
) -> None:
    decided = plan(marker(phase), version)
    assert decided.action is action
    failure = decided.failure
    assert failure is not None and (failure.step, failure.text) == (step, error)
    assert not decided.count_attempt


def test_the_new_build_within_its_deadline_starts_its_probation_and_counts_the_start() -> None:
    decided = plan(marker(Phase.HANDOVER, deadline=1004.0), NEW)
    assert decided.action is StartAction.PROBATION
    assert decided.probation_seconds == pytest.approx(4.0)
    assert decided.count_attempt and decided.marker.attempts == 1
    assert decided.failure is None


def test_the_new_build_past_its_deadline_rolls_back_as_unhealthy() -> None:
    decided = plan(marker(Phase.HANDOVER, deadline=1000.0), NEW)
    assert decided.action is StartAction.ROLL_BACK
    assert decided.failure is not None
    assert decided.failure.text == (
        "new version 0.9.0 did not become healthy within 5s; restored 0.8.0"
    )
    assert decided.count_attempt


def test_a_second_start_of_the_new_build_is_a_crash() -> None:
    decided = plan(marker(Phase.HANDOVER, deadline=2000.0, attempts=1), NEW)
    assert decided.action is StartAction.ROLL_BACK
    assert decided.marker.attempts == 2
    assert decided.failure is not None and "crashed or was restarted" in decided.failure.text


def test_a_rolled_back_marker_without_a_backup_is_reported_not_rolled_back_again() -> None:
    decided = plan(
        marker(Phase.ROLLED_BACK, error="it broke; restored 0.8.0"), NEW, backup_exists=False
    )
    assert decided.action is StartAction.REPORT
    assert decided.failure is not None and decided.failure.text == "it broke; restored 0.8.0"


@pytest.mark.parametrize(
    ("phase", "version", "remove_backup"),
    [
        (Phase.HANDOVER, NEW, True),
        (Phase.HANDOVER, OLD, False),
        (Phase.INSTALLING, NEW, False),
        (Phase.ROLLED_BACK, OLD, False),
    ],
)
def test_a_concluded_command_only_needs_its_cleanup(
    phase: Phase, version: str, remove_backup: bool
) -> None:
    decided = plan(marker(phase, attempts=3), version, concluded=True)
    assert decided.action is StartAction.CLEAN_UP
    assert decided.remove_backup is remove_backup
    assert decided.failure is None and not decided.count_attempt


@pytest.mark.parametrize(
    ("healthy", "elapsed", "verdict"),
    [
        (True, 0.0, Verdict.PASSED),
        (True, 99.0, Verdict.PASSED),  # healthy wins, even when checked late
        (False, 4.9, Verdict.WAIT),
        (False, 5.0, Verdict.OVERDUE),
    ],
)
def test_the_probation_verdict(healthy: bool, elapsed: float, verdict: Verdict) -> None:
    probation = Probation(marker(Phase.HANDOVER), seconds=5.0)
    assert probation.verdict(healthy=healthy, elapsed=elapsed) is verdict
