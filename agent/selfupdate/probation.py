"""What a starting build does about an update marker, and the new build's probation.

Before it serves, every build reads the marker the previous one left (:func:`settle_at_start`)
and does exactly one of (:func:`plan_at_start`, pure, from the marker's phase and which build
this is)::

    clean up    the command has its result already; only removing the marker (and, after a
                success, the backup) was cut short
    report      record the failure for the marker's command (published on the first
                connection, like any undelivered result) and drop the marker
    roll back   put the backup back and exec it; when that fails, report that instead
    probation   the new build after a hand-over: healthy (enrolled + NATS connected) within the
                marker's deadline, else the old build comes back (:func:`watch`)

A new build that starts a second time in the ``handover`` phase crashed or was restarted before
it became healthy: it rolls back. See ``docs/self-update.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from agent.selfupdate.failures import FailedStep, FailureFields, UpdateFailure, failure_fields
from agent.selfupdate.handover import ExecRequest, roll_back
from agent.selfupdate.marker import MarkerStore, Phase, UpdateMarker
from agent.selfupdate.program import FileOperationError, ProgramFiles
from contracts.durations import format_duration
from contracts.messages import CommandKind, CommandResult, CommandStatus

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent.commands import CommandDispatcher
    from agent.health import Readiness
    from agent.ledger import CommandLedger

__all__ = [
    "Probation",
    "StartAction",
    "StartDecision",
    "StartPlan",
    "Verdict",
    "decide_at_start",
    "plan_at_start",
    "settle_at_start",
    "unhealthy_failure",
    "watch",
]

log = logging.getLogger(__name__)

_POLL = 0.05


class StartAction(StrEnum):
    CLEAN_UP = "clean_up"
    REPORT = "report"
    ROLL_BACK = "roll_back"
    PROBATION = "probation"


@dataclass(frozen=True)
class StartPlan:
    """What to do about a marker; ``marker`` has this start counted when ``count_attempt``."""

    action: StartAction
    marker: UpdateMarker
    failure: UpdateFailure | None = None
    probation_seconds: float | None = None
    remove_backup: bool = False
    count_attempt: bool = False


def _unknown_build(marker: UpdateMarker, version: str) -> UpdateFailure:
    return UpdateFailure(
        FailedStep.INTERRUPTED,
        f"the update to {marker.new_version} was interrupted; this agent now runs {version} "
        f"(expected {marker.old_version} or {marker.new_version})",
    )


def unhealthy_failure(marker: UpdateMarker) -> UpdateFailure:
    return UpdateFailure(
        FailedStep.HANDOVER,
        f"new version {marker.new_version} did not become healthy within "
        f"{format_duration(marker.health_timeout)}; restored {marker.old_version}",
    )


def _report(marker: UpdateMarker, failure: UpdateFailure) -> StartPlan:
    return StartPlan(StartAction.REPORT, marker, failure)


def _plan_handover(marker: UpdateMarker, version: str, now: float) -> StartPlan:
    old, new = marker.old_version, marker.new_version
    if version == old:
        text = f"new version {new} was replaced by {old} before it became healthy"
        return _report(marker, UpdateFailure(FailedStep.INTERRUPTED, text))
    if version != new:
        return _report(marker, _unknown_build(marker, version))
    marker = marker.with_(attempts=marker.attempts + 1)
    if marker.attempts > 1:
        text = (
            f"new version {new} stopped (crashed or was restarted) before it became "
            f"healthy; restored {old}"
        )
        failure = UpdateFailure(FailedStep.HANDOVER, text)
        return StartPlan(StartAction.ROLL_BACK, marker, failure, count_attempt=True)
    deadline = marker.deadline if marker.deadline is not None else now
    if now >= deadline:
        return StartPlan(
            StartAction.ROLL_BACK, marker, unhealthy_failure(marker), count_attempt=True
        )
    return StartPlan(
        StartAction.PROBATION, marker, probation_seconds=deadline - now, count_attempt=True
    )


def plan_at_start(
    marker: UpdateMarker, *, version: str, concluded: bool, now: float, backup_exists: bool
) -> StartPlan:
    """Pure: what build ``version`` does about ``marker`` at wall-clock ``now``; ``concluded``
    says whether the marker's command has a result in the ledger already."""
    old, new = marker.old_version, marker.new_version
    if concluded:
        success = marker.phase is Phase.HANDOVER and version == new
        return StartPlan(StartAction.CLEAN_UP, marker, remove_backup=success)
    if marker.phase is Phase.INSTALLING:
        if version == new:
            text = f"the agent stopped during the trial of {new}; restored {old}"
            return StartPlan(
                StartAction.ROLL_BACK, marker, UpdateFailure(FailedStep.INTERRUPTED, text)
            )
        if version == old:
            text = f"the agent stopped while installing {new}; still at {old}"
            return _report(marker, UpdateFailure(FailedStep.INTERRUPTED, text))
        return _report(marker, _unknown_build(marker, version))
    if marker.phase is Phase.HANDOVER:
        return _plan_handover(marker, version, now)
    # ROLLED_BACK: whoever rolled back wrote why, and which step failed.
    failure = UpdateFailure(
        marker.failed_step or FailedStep.HANDOVER,
        marker.error or f"the update to {new} was rolled back",
    )
    if version == new and backup_exists:
        return StartPlan(StartAction.ROLL_BACK, marker, failure)
    return _report(marker, failure)


@dataclass
class StartDecision:
    """What a starting agent does about an update marker it found, once the files are done."""

    marker: UpdateMarker | None = None
    exec_request: ExecRequest | None = None  # start the restored old build now
    probation_seconds: float | None = None  # the new build: be healthy within this, or roll back
    failure: UpdateFailure | None = None  # record this failure for the marker's command
    remove_marker: bool = False
    remove_backup: bool = False


def decide_at_start(
    marker: UpdateMarker,
    *,
    version: str,
    concluded: bool,
    store: MarkerStore,
    files: ProgramFiles,
    now: float | None = None,
) -> StartDecision:
    """:func:`plan_at_start`, with the marker and program files brought in line with it."""
    plan = plan_at_start(
        marker,
        version=version,
        concluded=concluded,
        now=time.time() if now is None else now,
        backup_exists=marker.backup.exists(),
    )
    marker = plan.marker
    if plan.count_attempt:
        store.write(marker)
    if plan.action is StartAction.CLEAN_UP:
        return StartDecision(marker, remove_marker=True, remove_backup=plan.remove_backup)
    if plan.action is StartAction.PROBATION:
        return StartDecision(marker, probation_seconds=plan.probation_seconds)
    assert plan.failure is not None
    if plan.action is StartAction.REPORT:
        return StartDecision(marker, failure=plan.failure, remove_marker=True)
    outcome = roll_back(marker, store, files, plan.failure)
    if isinstance(outcome, ExecRequest):
        return StartDecision(marker, exec_request=outcome)
    # The backup could not be put back: this build keeps running and says so.
    return StartDecision(marker, failure=outcome, remove_marker=True)


# -- at start -------------------------------------------------------------------------------


def _restore_missing_program(marker: UpdateMarker, files: ProgramFiles) -> None:
    """An older build's install could be killed between its two renames (program moved to the
    backup, the new build not yet in place): give the program's path its backup again, keeping
    the backup for the decision that follows. This build's install never leaves that gap."""
    if marker.program.exists() or not marker.backup.exists():
        return
    try:
        files.keep_copy(marker.backup, marker.program)
    except FileOperationError as e:
        log.error("the program file %s is missing and restoring it failed: %s", marker.program, e)
        return
    files.sync_dir(marker.program.parent)
    log.warning(
        "the program file %s was missing (an update cut short); restored %s from %s",
        marker.program,
        marker.old_version,
        marker.backup,
    )


def settle_at_start(
    ledger: CommandLedger, *, version: str, markers: MarkerStore, files: ProgramFiles
) -> tuple[ExecRequest | None, Probation | None]:
    """Load the command ledger, settling a marker left by the previous build: the old build to
    exec now, or the probation this build starts on (deadline counted from :func:`watch`)."""
    marker = markers.read()
    if marker is None:
        ledger.load()
        return None, None
    ledger.load(keep_open=frozenset({marker.command_id}))
    _restore_missing_program(marker, files)
    known = ledger.get(marker.command_id)
    decision = decide_at_start(
        marker,
        version=version,
        concluded=known is not None and known.result is not None,
        store=markers,
        files=files,
    )
    marker = decision.marker
    assert marker is not None
    if decision.exec_request is not None:
        return decision.exec_request, None
    if decision.failure is not None:
        # Recorded before the marker goes (a crash in between only repeats the cleanup);
        # published by the dispatcher on the first connection, like any undelivered result.
        ledger.finish(_result(marker, ledger.agent_id, decision.failure))
        log.warning("self_update to %s failed: %s", marker.new_version, decision.failure.text)
    if decision.remove_backup:
        with contextlib.suppress(OSError):
            files.remove(marker.backup)
    if decision.remove_marker:
        markers.remove()
    if decision.probation_seconds is None:
        return None, None
    log.info(
        "self_update: %s took over from %s; healthy within %s or %s comes back",
        marker.new_version,
        marker.old_version,
        format_duration(round(decision.probation_seconds, 1)),
        marker.old_version,
    )
    return None, Probation(marker, decision.probation_seconds)


def _result(marker: UpdateMarker, agent_id: str, failure: UpdateFailure | None) -> CommandResult:
    why: FailureFields = {}
    if failure is None:
        status, detail = CommandStatus.SUCCEEDED, marker.success_detail()
    else:
        status, detail, why = CommandStatus.FAILED, marker.failure_detail(), failure_fields(failure)
    return CommandResult(
        command_id=marker.command_id,
        agent_id=agent_id,
        kind=CommandKind.SELF_UPDATE,
        status=status,
        finished_at=datetime.now(UTC),
        detail=detail,
        **why,
    )


# -- on probation ---------------------------------------------------------------------------


class Verdict(StrEnum):
    WAIT = "wait"
    PASSED = "passed"
    OVERDUE = "overdue"


@dataclass(frozen=True)
class Probation:
    """The new build after a hand-over: healthy within ``seconds`` of the watch's start, or
    the old build comes back. Pure: the watch feeds it the clock and the readiness."""

    marker: UpdateMarker
    seconds: float

    def verdict(self, *, healthy: bool, elapsed: float) -> Verdict:
        if healthy:
            return Verdict.PASSED
        if elapsed >= self.seconds:
            return Verdict.OVERDUE
        return Verdict.WAIT


async def watch(
    probation: Probation,
    *,
    readiness: Readiness,
    dispatcher: CommandDispatcher,
    markers: MarkerStore,
    files: ProgramFiles,
    hand_over: Callable[[ExecRequest], None],
) -> None:
    """Report success once healthy; past the deadline, roll back (or report that it could not)."""
    marker = probation.marker
    started = time.monotonic()
    while True:
        verdict = probation.verdict(
            healthy=readiness.connection_reason() is None, elapsed=time.monotonic() - started
        )
        if verdict is Verdict.PASSED:
            await _conclude(marker, None, dispatcher, markers, files)
            return
        if verdict is Verdict.OVERDUE:
            outcome = roll_back(marker, markers, files, unhealthy_failure(marker))
            if isinstance(outcome, ExecRequest):
                hand_over(outcome)
                return
            await _conclude(marker, outcome, dispatcher, markers, files)
            return
        await asyncio.sleep(_POLL)


async def _conclude(
    marker: UpdateMarker,
    failure: UpdateFailure | None,
    dispatcher: CommandDispatcher,
    markers: MarkerStore,
    files: ProgramFiles,
) -> None:
    result = _result(marker, dispatcher.session.agent_id, failure)
    dispatcher.ledger.finish(result)
    if failure is None:
        with contextlib.suppress(OSError):
            files.remove(marker.backup)
        entry = dispatcher.ledger.get(marker.command_id)
        since = entry.received_at if entry is not None else marker.started_at
        log.info(
            "self_update complete: %s -> %s (%.1fs after the command arrived)",
            marker.old_version,
            marker.new_version,
            (datetime.now(UTC) - since).total_seconds(),
        )
    markers.remove()
    await dispatcher.conclude(result)
