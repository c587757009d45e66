"""Install: the verified build takes the program's place, the old one kept as a backup.

    backup       link <program> → <program>.bak     ("backup current binary: rename …: …")
    install      rename temp → <program> (atomic, over the old name)

The program's path names a runnable build at every instant: the backup is a second name for the
old file (a hard link, or a copy where links are refused), then one rename puts the new build
over the old name. A kill between the two steps leaves the old build in place and a backup
beside it; the marker (phase ``installing``, written before the first step) settles that at
the next start (:mod:`agent.selfupdate.probation`). Every rename goes through
:class:`~agent.selfupdate.program.ProgramFiles`, whose errors read like the Go agent's.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from agent.selfupdate.download import stage_file
from agent.selfupdate.failures import FailedStep, UpdateFailedError, UpdateFailure
from agent.selfupdate.marker import MarkerStore, UpdateMarker
from agent.selfupdate.program import FileOperationError, ProgramFiles

__all__ = ["install", "restore"]

log = logging.getLogger(__name__)


def install(
    marker: UpdateMarker, staged: Path, *, markers: MarkerStore, files: ProgramFiles
) -> None:
    """Back the program up and put ``staged`` in its place; on failure the old build is back
    and the marker gone."""
    program = marker.program
    markers.write(marker)
    try:
        files.keep_copy(program, marker.backup)
    except FileOperationError as e:
        markers.remove()
        failure = UpdateFailure(FailedStep.BACKUP, f"backup current binary: {e}", e.errno)
        raise UpdateFailedError(failure) from None
    try:
        _place(staged, program, files)
    except FileOperationError as e:
        restored = restore(marker, files)
        markers.remove()
        step = FailedStep.RESTORE if restored else FailedStep.INSTALL
        failure = UpdateFailure(step, f"install new binary: {e}{restored}", e.errno)
        raise UpdateFailedError(failure) from None
    except BaseException:
        restore(marker, files)
        markers.remove()
        raise
    files.sync_dir(program.parent)


def _place(staged: Path, program: Path, files: ProgramFiles) -> None:
    if staged.parent == program.parent:
        files.replace(staged, program)
        return
    # Staged elsewhere (the program's directory was read-only and no longer is):
    # copy beside the program first so the final step is still one atomic rename.
    try:
        sink, beside = stage_file(program.parent, program.name)
    except OSError as e:
        raise FileOperationError("open", (program.parent,), e) from None
    try:
        with sink, open(staged, "rb") as source:
            while chunk := source.read(1024 * 1024):
                sink.write(chunk)
            sink.flush()
            os.fsync(sink.fileno())
        os.chmod(beside, staged.stat().st_mode & 0o7777)
        files.replace(beside, program)
    except BaseException:
        beside.unlink(missing_ok=True)
        raise


def restore(marker: UpdateMarker, files: ProgramFiles) -> str:
    """Rename the backup back; ``""`` on success, else the text to append to the error."""
    try:
        files.replace(marker.backup, marker.program)
    except FileOperationError as e:
        log.error("restoring %s failed: %s", marker.old_version, e)
        return f"; restoring {marker.old_version} failed: {e}"
    files.sync_dir(marker.program.parent)
    log.info("restored %s at %s", marker.old_version, marker.program)
    return ""
