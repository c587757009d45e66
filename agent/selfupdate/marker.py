"""The update marker ``<data-dir>/update.json``: the only memory of a self_update that survives
the exec.

It says which command is in flight, which build is old and which new, where the backup is, and in
which phase the update is::

    installing   the old process backs up, installs and tries the new build (it is in charge)
    handover     the old process exec'd the new build; the new process is on probation until
                 it is healthy (enrolled + NATS connected), at most until ``deadline``
    rolled_back  the backup was (or is being) renamed back; the old build reports ``error``

Whichever build starts next reads the marker before it serves (:mod:`agent.selfupdate.probation`),
so a crash or a restart at any point ends in exactly one result for the command, and never in a
program file that nobody knows about. See ``docs/self-update.md``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from agent.files import set_aside, write_atomic
from agent.selfupdate.failures import FailedStep

__all__ = ["MARKER_FILE", "MarkerStore", "Phase", "UpdateMarker", "new_marker"]

log = logging.getLogger(__name__)

MARKER_FILE = "update.json"


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
    # The step whose failure was rolled back, so the build that reports it gives the same
    # failure kind (a marker from an older build has none: it reads as a failed hand-over).
    failed_step: FailedStep | None = None

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
            failed_step=str(self.failed_step) if self.failed_step else None,
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
            failed_step=_failed_step(data.get("failed_step")),
        )


def _failed_step(value: Any) -> FailedStep | None:
    """A step this build does not know (a newer build's) reads as none."""
    try:
        return FailedStep(value) if isinstance(value, str) else None
    except ValueError:
        return None


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
            aside = set_aside(self.path)
            log.warning("update marker %s is corrupt (%s); moved it to %s", self.path, e, aside)
            return None

    def write(self, marker: UpdateMarker) -> None:
        write_atomic(self.path, marker.to_json())

    def remove(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


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
