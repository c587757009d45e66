"""Handing the agent over from one build to the next across ``exec``, and taking it back.

The old process, once the new build passed its trial, writes the marker's ``handover`` phase
with a deadline and asks the runtime to stop and ``execv`` the new program
(:func:`hand_over`); the new process is then on probation (:mod:`agent.selfupdate.probation`).
Whoever finds the new build wanting puts the backup back with :func:`roll_back`, marker first.
See ``docs/self-update.md``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from agent.selfupdate.failures import FailedStep, UpdateFailure
from agent.selfupdate.marker import MarkerStore, Phase, UpdateMarker
from agent.selfupdate.program import FileOperationError, ProgramFiles, go_strerror
from contracts.durations import format_duration

__all__ = [
    "SELF_UPDATE_PROTOCOL",
    "ExecRequest",
    "exec_program",
    "hand_over",
    "program_argv",
    "recover_failed_exec",
    "roll_back",
]

log = logging.getLogger(__name__)

# What ``version --json`` reports; a build must speak it to be installed by self_update.
SELF_UPDATE_PROTOCOL = 1


@dataclass(frozen=True)
class ExecRequest:
    """Replace this process with ``argv`` once the runtime has stopped cleanly."""

    argv: list[str]
    reason: str


def program_argv(program: Path) -> list[str]:
    """How to start ``program`` the way this process was started: same interpreter, same
    arguments after the program (the environment is inherited as it is)."""
    return [sys.executable, str(program), *sys.argv[1:]]


def exec_program(request: ExecRequest) -> NoReturn:
    """``execv`` after flushing what this process has to say. Raises ``OSError`` on failure."""
    log.info("%s: exec %s", request.reason, " ".join(request.argv[:2]))
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(request.argv[0], request.argv)  # noqa: S606 (argv is ours: interpreter + program)


def hand_over(marker: UpdateMarker, store: MarkerStore) -> ExecRequest:
    """The new build passed its trial: mark the hand-over, with the new build's deadline to be
    healthy, and say how to start it."""
    store.write(marker.with_(phase=Phase.HANDOVER, deadline=time.time() + marker.health_timeout))
    log.info(
        "self_update: %s passed its trial; handing over (healthy within %s or %s comes back)",
        marker.new_version,
        format_duration(marker.health_timeout),
        marker.old_version,
    )
    return ExecRequest(program_argv(marker.program), f"handing over to {marker.new_version}")


def roll_back(
    marker: UpdateMarker, store: MarkerStore, files: ProgramFiles, failure: UpdateFailure
) -> ExecRequest | UpdateFailure:
    """Put the backup back and say how to start it; on failure, the failure to report instead.

    The marker is written first: if the process dies between the two steps, the next start
    (still the new build) finds ``rolled_back`` and finishes the rename.
    """
    store.write(marker.with_(phase=Phase.ROLLED_BACK, error=failure.text, failed_step=failure.step))
    try:
        files.replace(marker.backup, marker.program)
    except FileOperationError as e:
        return UpdateFailure(
            FailedStep.RESTORE,
            f"{failure.text}; restoring {marker.old_version} failed: {e}",
            e.errno,
        )
    files.sync_dir(marker.program.parent)
    log.warning("%s", failure.text)
    return ExecRequest(program_argv(marker.program), f"restoring {marker.old_version}")


def recover_failed_exec(data_dir: Path, error: OSError) -> None:
    """``execv`` of the new build failed: put the old one back so the next start (by the
    service manager) runs it and reports the failure."""
    store = MarkerStore(data_dir)
    marker = store.read()
    if marker is None or marker.phase is not Phase.HANDOVER:
        return
    text = (
        f"exec of new version {marker.new_version} failed: {go_strerror(error)}; "
        f"restored {marker.old_version}"
    )
    outcome = roll_back(marker, store, ProgramFiles(), UpdateFailure(FailedStep.HANDOVER, text))
    if isinstance(outcome, UpdateFailure):
        log.error("%s", outcome.text)
