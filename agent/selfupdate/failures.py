"""Why a self_update failed, and the one place that says how a failure reads in its result.

A failure names the step that failed (:class:`FailedStep`), the text the result's ``error`` says
(the real error text: operators and runbooks grep for it) and, where the OS refused something,
the errno behind it. :func:`failure_fields` turns a failure into fields of the command's result;
it is the only place that decides them, so a structured kind for the Console (say
``read_only_program`` for a ``BACKUP`` step refused with ``EROFS``) is added there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

__all__ = [
    "FailedStep",
    "FailureFields",
    "UpdateFailedError",
    "UpdateFailure",
    "failure_fields",
]


class FailedStep(StrEnum):
    DOWNLOAD = "download"
    VERIFY = "verify"  # sha256, signature, the new build's ``version --json``
    BACKUP = "backup"  # rename <program> -> <program>.bak
    INSTALL = "install"  # rename the staged file -> <program>
    TRIAL = "trial"  # the new build as a trial child
    HANDOVER = "handover"  # the exec, or the new build on probation after it
    INTERRUPTED = "interrupted"  # the agent stopped or was replaced during the update
    RESTORE = "restore"  # the backup could not be put back


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


class FailureFields(TypedDict, total=False):
    error: str


def failure_fields(failure: UpdateFailure) -> FailureFields:
    """The fields of a failed ``self_update`` result that say why (``error`` today)."""
    return {"error": failure.text}
