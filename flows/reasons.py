"""Reason codes as the flows read them: an :class:`~contracts.vocabulary.ErrorReason`, or the
text of one a newer Console added (kept, never dropped). Pure: no I/O."""

from __future__ import annotations

from contracts.vocabulary import ErrorReason

__all__ = ["parse_reason"]


def parse_reason(text: str) -> ErrorReason | str:
    """The reason as an :class:`ErrorReason`; a reason this build does not know stays text."""
    try:
        return ErrorReason(text)
    except ValueError:
        return text
