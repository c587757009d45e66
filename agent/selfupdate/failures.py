"""Why a self_update failed, and the one place that says how a failure reads in its result.

A failure names the step that failed (:class:`FailedStep`), the text the result's ``error`` says
(the real error text: operators and runbooks grep for it) and, where the OS refused something,
the errno behind it. :func:`failure_fields` turns a failure into fields of the command's result;
it is the only place that decides them. The result's ``failure_kind`` (the fact the Console and
the flows judge, never the text) is the step's kind, with one refinement::

    download            download_failed      (HTTP error, transport, writing the staged file)
    download_too_large  download_too_large
    checksum            checksum_mismatch
    signature           bad_signature
    smoke_check         smoke_check_failed   (``version --json``: exit, timeout, version, protocol)
    backup, install     read_only_program    when refused with EROFS, EACCES or EPERM
                        install_failed       otherwise (the old build is in place)
    trial, handover     rolled_back          (the new build was not healthy; the old one is back)
    interrupted         interrupted
    restore             rollback_failed      (the old build could not be put back)
"""

from __future__ import annotations

import errno as errnos
from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

from contracts.vocabulary.commands import CommandFailureKind

__all__ = [
    "FailedStep",
    "FailureFields",
    "UpdateFailedError",
    "UpdateFailure",
    "failure_fields",
    "failure_kind",
]


class FailedStep(StrEnum):
    DOWNLOAD = "download"
    DOWNLOAD_TOO_LARGE = "download_too_large"  # past the size cap
    CHECKSUM = "checksum"  # the sha256 of what was downloaded
    SIGNATURE = "signature"  # the fleet key's signature of that sha256
    SMOKE_CHECK = "smoke_check"  # the new build's ``version --json``
    BACKUP = "backup"  # rename <program> -> <program>.bak
    INSTALL = "install"  # rename the staged file -> <program>
    TRIAL = "trial"  # the new build as a trial child
    HANDOVER = "handover"  # the exec, or the new build on probation after it
    INTERRUPTED = "interrupted"  # the agent stopped or was replaced during the update
    RESTORE = "restore"  # the backup could not be put back (after any other step failed)


@dataclass(frozen=True)
class UpdateFailure:
    step: FailedStep
    text: str
    errno: int | None = None


class UpdateFailedError(Exception):
    """One step failed; ``failure`` says which and what the result's ``error`` says."""

    def __init__(self, failure: UpdateFailure) -> None:
        super().__init__(failure.text)
        self.failure = failure

    @property
    def text(self) -> str:
        return self.failure.text


_KIND_OF_STEP: dict[FailedStep, CommandFailureKind] = {
    FailedStep.DOWNLOAD: CommandFailureKind.DOWNLOAD_FAILED,
    FailedStep.DOWNLOAD_TOO_LARGE: CommandFailureKind.DOWNLOAD_TOO_LARGE,
    FailedStep.CHECKSUM: CommandFailureKind.CHECKSUM_MISMATCH,
    FailedStep.SIGNATURE: CommandFailureKind.BAD_SIGNATURE,
    FailedStep.SMOKE_CHECK: CommandFailureKind.SMOKE_CHECK_FAILED,
    FailedStep.BACKUP: CommandFailureKind.INSTALL_FAILED,
    FailedStep.INSTALL: CommandFailureKind.INSTALL_FAILED,
    FailedStep.TRIAL: CommandFailureKind.ROLLED_BACK,
    FailedStep.HANDOVER: CommandFailureKind.ROLLED_BACK,
    FailedStep.INTERRUPTED: CommandFailureKind.INTERRUPTED,
    FailedStep.RESTORE: CommandFailureKind.ROLLBACK_FAILED,
}
# The program's file or directory cannot be written: a read-only image layer (EROFS), a
# root-owned /usr/local/bin under a non-root agent (EACCES), an immutable file (EPERM).
_NO_WRITE_ACCESS = frozenset({errnos.EROFS, errnos.EACCES, errnos.EPERM})
_PROGRAM_FILE_STEPS = frozenset({FailedStep.BACKUP, FailedStep.INSTALL})


def failure_kind(failure: UpdateFailure) -> CommandFailureKind:
    """The fact a failure is (see the table in this module's docstring)."""
    if failure.step in _PROGRAM_FILE_STEPS and failure.errno in _NO_WRITE_ACCESS:
        return CommandFailureKind.READ_ONLY_PROGRAM
    return _KIND_OF_STEP[failure.step]


class FailureFields(TypedDict, total=False):
    error: str
    failure_kind: CommandFailureKind


def failure_fields(failure: UpdateFailure) -> FailureFields:
    """The fields of a failed ``self_update`` result that say why: ``error`` for people,
    ``failure_kind`` for machines."""
    return {"error": failure.text, "failure_kind": failure_kind(failure)}
