"""Enum fields that read a value this build does not know as ``None``.

An agent newer than the Console (or a Console newer than the agent that wrote a stored
message) may send a kind the reader has no member for yet. One unknown fact must not cost the
whole message — a command result the Console cannot parse is a result lost — so such a field
reads ``None``, the same as "not sent". A value that is not a string is still an error.
"""

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import BeforeValidator

__all__ = ["unknown_as_none"]


def unknown_as_none(enum: type[StrEnum]) -> BeforeValidator:
    """For ``Annotated[E | None, unknown_as_none(E)]``: a string that is no value of ``enum``
    becomes ``None``."""
    known = frozenset(member.value for member in enum)

    def check(value: Any) -> Any:
        if isinstance(value, str) and value not in known:
            return None
        return value

    checker: Callable[[Any], Any] = check
    return BeforeValidator(checker)
