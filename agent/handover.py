"""Handing the agent over from one build to the next across ``exec``, and taking it back.

The update marker ``<data-dir>/update.json`` is the only memory that survives the exec. It says
which command is in flight, which build is old and which new, where the backup is, and in which
phase the update is::

    installing   the old process backs up, installs and tries the new build (it is in charge)
    handover     the old process exec'd the new build; the new process is on probation until
                 it is healthy (enrolled + NATS connected), at most until ``deadline``
    rolled_back  the backup was (or is being) renamed back; the old build reports ``error``

Whichever build starts next reads the marker before it serves (:func:`decide_at_start`), so a
crash or a restart at any point ends in exactly one result for the command, and never in a
program file that nobody knows about. See ``docs/self-update.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

from agent.files import write_atomic
from agent.program import FileOperationError, ProgramFiles, go_strerror
from contracts.durations import format_duration

__all__ = [
    "MARKER_FILE",
    "SELF_UPDATE_PROTOCOL",
    "TRIAL_ENV",
    "TRIAL_PORT_FILE",
    "ExecRequest",
    "MarkerStore",
    "Phase",
    "StartDecision",
    "UpdateMarker",
    "decide_at_start",
    "exec_program",
    "new_marker",
    "program_argv",
    "recover_failed_exec",
    "roll_back",
    "trial_parent",
    "unhealthy_error",
]

log = logging.getLogger(__name__)

MARKER_FILE = "update.json"
TRIAL_PORT_FILE = "update-trial.port"
# Set only in the environment of a build under trial: "<parent pid>:<seconds to live>".
TRIAL_ENV = "PROXIMA_UPDATE_TRIAL"
# What ``version --json`` reports; a build must speak it to be installed by self_update.
SELF_UPDATE_PROTOCOL = 1


class Phase(StrEnum):
    INSTALLING = "installing"
    HANDOVER = "handover"
    ROLLED_BACK = "rolled_back"


class MarkerCorruptError(ValueError):
    pass


def _field(data: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise MarkerCorruptError(f"{name}: expected {kind.__name__}")
    return value


@dataclass(frozen=True)
class UpdateMarker:
    """A plain dataclass, not a pydantic model: it is read at every start, and the agent's
    resident memory is counted in megabytes."""

    command_id: str
    rollout_id: str | None
    old_version: str
    new_version: str
    program: Path
    backup: Path
    phase: Phase
    health_timeout: float
    started_at: datetime
    deadline: float | None = None  # wall clock (epoch seconds): it must survive exec
    attempts: int = 0  # starts of the new build in the handover phase
    error: str | None = None

    def with_(self, **changes: Any) -> UpdateMarker:
        return dataclasses.replace(self, **changes)

    def failure_detail(self) -> dict[str, str]:
        return {"old_version": self.old_version, "target_version": self.new_version}

    def success_detail(self) -> dict[str, str]:
        return {"old_version": self.old_version, "new_version": self.new_version}

    def to_json(self) -> bytes:
        data = dataclasses.asdict(self)
        data.update(
            program=str(self.program),
            backup=str(self.backup),
            phase=str(self.phase),
            started_at=self.started_at.isoformat(),
        )
        return (json.dumps(data, indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes) -> UpdateMarker:
        try:
            data = json.loads(raw)
        except ValueError:
            raise MarkerCorruptError("not JSON") from None
        if not isinstance(data, dict):
            raise MarkerCorruptError("not a JSON object")
        try:
            phase = Phase(_field(data, "phase", str))
            started_at = datetime.fromisoformat(_field(data, "started_at", str))
        except ValueError as e:
            raise MarkerCorruptError(str(e)) from None
        return cls(
            command_id=_field(data, "command_id", str),
            rollout_id=_field(data, "rollout_id", str, optional=True),
            old_version=_field(data, "old_version", str),
            new_version=_field(data, "new_version", str),
            program=Path(_field(data, "program", str)),
            backup=Path(_field(data, "backup", str)),
            phase=phase,
            health_timeout=_field(data, "health_timeout", float),
            started_at=started_at,
            deadline=_field(data, "deadline", float, optional=True),
            attempts=_field(data, "attempts", int),
            error=_field(data, "error", str, optional=True),
        )


class MarkerStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / MARKER_FILE

    def read(self) -> UpdateMarker | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read update marker %s: %s; ignoring it", self.path, e)
            return None
        try:
            return UpdateMarker.from_json(raw)
        except MarkerCorruptError as e:
            aside = self.path.with_name(f"{MARKER_FILE}.corrupt-{int(time.time())}")
            log.warning("update marker %s is corrupt (%s); moved it to %s", self.path, e, aside)
            os.replace(self.path, aside)
            return None

    def write(self, marker: UpdateMarker) -> None:
        write_atomic(self.path, marker.to_json())

    def remove(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


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


def trial_parent(value: str | None) -> tuple[int, float] | None:
    """``(parent pid, seconds to live)`` from :data:`TRIAL_ENV`, ``None`` when not a trial."""
    if not value:
        return None
    pid, _, ttl = value.partition(":")
    try:
        return int(pid), float(ttl or 120)
    except ValueError:
        return None


def roll_back(
    marker: UpdateMarker, store: MarkerStore, files: ProgramFiles, error: str
) -> ExecRequest | str:
    """Put the backup back and say how to start it; on failure, the error to report instead.

    The marker is written first: if the process dies between the two steps, the next start
    (still the new build) finds ``rolled_back`` and finishes the rename.
    """
    store.write(marker.with_(phase=Phase.ROLLED_BACK, error=error))
    try:
        files.replace(marker.backup, marker.program)
    except FileOperationError as e:
        return f"{error}; restoring {marker.old_version} failed: {e}"
    files.sync_dir(marker.program.parent)
    log.warning("%s", error)
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
    outcome = roll_back(marker, store, ProgramFiles(), text)
    if isinstance(outcome, str):
        log.error("%s", outcome)


@dataclass
class StartDecision:
    """What a starting agent does about an update marker it found."""

    marker: UpdateMarker | None = None
    exec_request: ExecRequest | None = None  # start the restored old build now
    probation_seconds: float | None = None  # the new build: be healthy within this, or roll back
    failure: str | None = None  # record this failure for the marker's command
    remove_marker: bool = False
    remove_backup: bool = False


def _message_for_unknown(marker: UpdateMarker, version: str) -> str:
    return (
        f"the update to {marker.new_version} was interrupted; this agent now runs {version} "
        f"(expected {marker.old_version} or {marker.new_version})"
    )


def decide_at_start(
    marker: UpdateMarker,
    *,
    version: str,
    concluded: bool,
    store: MarkerStore,
    files: ProgramFiles,
    now: float | None = None,
) -> StartDecision:
    """Decide, before serving, what to do about ``marker``; ``concluded`` says whether the
    marker's command already has a result in the ledger."""
    now = time.time() if now is None else now
    old, new = marker.old_version, marker.new_version
    if concluded:
        # The result was recorded; only the cleanup was cut short.
        success = marker.phase is Phase.HANDOVER and version == new
        return StartDecision(marker, remove_marker=True, remove_backup=success)
    if marker.phase is Phase.INSTALLING:
        if version == new:
            error = f"the agent stopped during the trial of {new}; restored {old}"
            return _rollback_decision(marker, store, files, error)
        if version == old:
            error = f"the agent stopped while installing {new}; still at {old}"
            return StartDecision(marker, failure=error, remove_marker=True)
        return StartDecision(
            marker, failure=_message_for_unknown(marker, version), remove_marker=True
        )
    if marker.phase is Phase.HANDOVER:
        if version == new:
            attempts = marker.attempts + 1
            marker = marker.with_(attempts=attempts)
            store.write(marker)
            if attempts > 1:
                error = (
                    f"new version {new} stopped (crashed or was restarted) before it became "
                    f"healthy; restored {old}"
                )
                return _rollback_decision(marker, store, files, error)
            deadline = marker.deadline if marker.deadline is not None else now
            if now >= deadline:
                return _rollback_decision(marker, store, files, unhealthy_error(marker))
            return StartDecision(marker, probation_seconds=deadline - now)
        if version == old:
            error = f"new version {new} was replaced by {old} before it became healthy"
            return StartDecision(marker, failure=error, remove_marker=True)
        return StartDecision(
            marker, failure=_message_for_unknown(marker, version), remove_marker=True
        )
    # ROLLED_BACK
    error = marker.error or f"the update to {new} was rolled back"
    if version == new and marker.backup.exists():
        return _rollback_decision(marker, store, files, error)
    return StartDecision(marker, failure=error, remove_marker=True)


def unhealthy_error(marker: UpdateMarker) -> str:
    return (
        f"new version {marker.new_version} did not become healthy within "
        f"{format_duration(marker.health_timeout)}; restored {marker.old_version}"
    )


def _rollback_decision(
    marker: UpdateMarker, store: MarkerStore, files: ProgramFiles, error: str
) -> StartDecision:
    outcome = roll_back(marker, store, files, error)
    if isinstance(outcome, ExecRequest):
        return StartDecision(marker, exec_request=outcome)
    # The backup could not be put back: this build keeps running and says so.
    return StartDecision(marker, failure=outcome, remove_marker=True)


def new_marker(
    *,
    command_id: str,
    rollout_id: str | None,
    old_version: str,
    new_version: str,
    program: Path,
    backup: Path,
    health_timeout: float,
) -> UpdateMarker:
    return UpdateMarker(
        command_id=command_id,
        rollout_id=rollout_id,
        old_version=old_version,
        new_version=new_version,
        program=program,
        backup=backup,
        phase=Phase.INSTALLING,
        health_timeout=health_timeout,
        started_at=datetime.now(UTC),
    )
