"""Bounded field types: every field another process sends is one of these, or bounded in place.

A field that crosses NATS or HTTP has a length, a count or a range, and a format where one
exists, so that what one agent or one token sends can neither be stored unbounded nor make a
reader raise outside its error tree. The numbers are protocol limits (a newer sender must stay
within them); the Console's settings may only be stricter (``inventory_*`` for chunks).

- :data:`VersionText`: the one version rule (``contracts.vocabulary.versions``, which
  ``rollout_policy.versions`` parses with), at most 64 characters;
- :data:`Identifier`: ids, instance ids, sync ids, nonces: ``[A-Za-z0-9._:-]``, 1 to 128;
- :func:`text`: free text of at most ``n`` characters, no NUL (PostgreSQL refuses it);
- :data:`Labels`: an agent's labels (32 pairs of 63 characters, as enrollment accepts);
- :data:`Detail`: a small free-form map (64 keys) beside the facts of a message;
- :data:`Seconds` and the other ``Annotated`` numbers: finite, never NaN or infinite;
- :data:`SqlIndex`: an offset or index a query binds, within :data:`MAX_SQL_INT`.

Models that carry them set ``allow_inf_nan=False`` (:data:`FINITE`), so ``NaN`` in a float
field is a validation error, not a number compared later.
"""

from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints

from contracts.vocabulary.versions import MAX_VERSION_LENGTH, VERSION_PATTERN

__all__ = [
    "FINITE",
    "MAX_DETAIL_KEYS",
    "MAX_LABELS",
    "MAX_SQL_INT",
    "MAX_TEXT",
    "ClusterSlugText",
    "Count",
    "Detail",
    "Identifier",
    "LabelText",
    "Labels",
    "Seconds",
    "SqlIndex",
    "VersionRangeText",
    "VersionText",
    "text",
]

MAX_TEXT = 4096
"""The longest free text in a message (an error, a problem's message)."""
MAX_LABELS = 32
MAX_DETAIL_KEYS = 64

FINITE = ConfigDict(allow_inf_nan=False)
"""Merge into a model's config: NaN and ±Infinity are validation errors in every float field."""

_NO_NUL = r"^[^\x00]*$"


def text(max_length: int = MAX_TEXT, *, min_length: int = 0) -> Any:
    """Free text of at most ``max_length`` characters without NUL, for ``Annotated[str, …]``."""
    return StringConstraints(min_length=min_length, max_length=max_length, pattern=_NO_NUL)


VersionText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_VERSION_LENGTH, pattern=VERSION_PATTERN),
]
"""A version by the one rule: ``MAJOR[.MINOR[.PATCH]][-PRE][+BUILD]``, 64 characters at most."""

VersionRangeText = Annotated[str, StringConstraints(max_length=512, pattern=r"^[ -~]*$")]
"""A range like ``>=0.7.0,<0.9.0`` (printable ASCII; its clauses are parsed by the policy)."""

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
]
"""An id a process made up: agent, command, instance, sync ids and nonces."""

ClusterSlugText = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
"""A cluster slug as a collector reports it: a DNS label today, up to 253 from old charts."""

LabelText = Annotated[str, StringConstraints(max_length=63, pattern=_NO_NUL)]
Labels = Annotated[dict[LabelText, LabelText], Field(max_length=MAX_LABELS)]
"""An agent's labels: what enrollment accepts, and so what heartbeats may report."""

Detail = Annotated[dict[Annotated[str, text(128)], Any], Field(max_length=MAX_DETAIL_KEYS)]
"""A small map beside the facts (a result's detail, a command's args, extra metrics)."""

Seconds = Annotated[float, Field(ge=0, le=366 * 86400)]
"""A duration or an age in seconds: finite, not negative, at most a year."""

Count = Annotated[int, Field(ge=0, le=2**53)]
"""A count or a size in bytes: not negative, exact in a JSON double."""

MAX_SQL_INT = 2**63 - 1
"""The largest integer the databases store and compare (PostgreSQL ``BIGINT``, SQLite's
``INTEGER``): past it a driver raises instead of answering."""

SqlIndex = Annotated[int, Field(ge=0, le=MAX_SQL_INT)]
"""A non-negative integer a request hands to SQL (an offset, a wave index): past
:data:`MAX_SQL_INT` it is a 422, never a driver's overflow."""
