"""Bounded field types: every field another process sends is one of these, or bounded in place.

A field that crosses NATS or HTTP has a length, a count or a range, and a format where one
exists, so that what one agent or one token sends can neither be stored unbounded nor make a
reader raise outside its error tree. The numbers are protocol limits (a newer sender must stay
within them); the Console's settings may only be stricter (``inventory_*`` for chunks).

- :data:`VersionText`: the one version rule (``contracts.vocabulary.versions``, which
  ``rollout_policy.versions`` parses with), at most 64 characters;
- :data:`Identifier`: ids, instance ids, sync ids, nonces: ``[A-Za-z0-9._:-]``, 1 to
  :data:`MAX_IDENTIFIER`;
- :func:`text`: free text of at most ``n`` characters, no NUL (PostgreSQL refuses it);
- :data:`Labels`: an agent's labels (32 pairs of 63 characters, as enrollment accepts), and
  :func:`parse_labels`, the one reader of their ``k=v,k2=v2`` text (settings, CLI, forms, the
  agent-list filter);
- :data:`Detail`: a small free-form map (64 keys) beside the facts of a message; a value the
  Console stores is typed in the message's contract (a result's ``new_version``:
  :data:`ResultDetail`);
- :data:`Seconds` and the other ``Annotated`` numbers: finite, never NaN or infinite;
- :data:`SqlIndex`: an offset or index a query binds, within :data:`MAX_SQL_INT`.

The ``MAX_*`` numbers are also the lengths of the database columns that store these fields
(``console/models.py`` imports them; ``tests/console/test_column_bounds.py`` holds every stored
field to its column).

Models that carry them set ``allow_inf_nan=False`` (:data:`FINITE`), so ``NaN`` in a float
field is a validation error, not a number compared later.
"""

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from contracts.vocabulary.versions import MAX_VERSION_LENGTH, VERSION_PATTERN

__all__ = [
    "FINITE",
    "MAX_DETAIL_KEYS",
    "MAX_IDENTIFIER",
    "MAX_LABEL",
    "MAX_LABELS",
    "MAX_NAME",
    "MAX_SQL_INT",
    "MAX_TEXT",
    "MAX_VERSION_LENGTH",
    "ClusterSlugText",
    "Count",
    "Detail",
    "Identifier",
    "LabelText",
    "Labels",
    "ResultDetail",
    "ResultDetailValues",
    "Seconds",
    "SqlIndex",
    "VersionRangeText",
    "VersionText",
    "parse_labels",
    "text",
]

MAX_TEXT = 4096
"""The longest free text in a message (an error, a problem's message)."""
MAX_LABELS = 32
MAX_LABEL = 63
"""A label's key or value (Kubernetes' own limit)."""
MAX_DETAIL_KEYS = 64
MAX_IDENTIFIER = 128
"""The longest id a process makes up (:data:`Identifier`)."""
MAX_NAME = 253
"""A DNS name: agent names, cluster slugs and names, Kubernetes object names."""

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
    str,
    StringConstraints(min_length=1, max_length=MAX_IDENTIFIER, pattern=r"^[A-Za-z0-9._:-]+$"),
]
"""An id a process made up: agent, command, instance, sync ids and nonces."""

ClusterSlugText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$"),
]
"""A cluster slug as a collector reports it: a DNS label today, up to 253 from old charts."""

LabelText = Annotated[str, StringConstraints(max_length=MAX_LABEL, pattern=_NO_NUL)]
Labels = Annotated[dict[LabelText, LabelText], Field(max_length=MAX_LABELS)]
"""An agent's labels: what enrollment accepts, and so what heartbeats may report."""


def parse_labels(text: str | Mapping[str, str] | None) -> dict[str, str]:
    """``k=v,k2=v2`` as :data:`Labels`; spaces around keys and values are dropped, empty text
    (and empty items) is no labels, a mapping is checked as it is. Strict and bounded: an item
    that is not ``key=value``, an empty key, a key given twice, a key or value over
    :data:`MAX_LABEL` characters or holding NUL, or more than :data:`MAX_LABELS` labels
    raises ``ValueError`` saying which."""
    if text is None:
        return {}
    if isinstance(text, Mapping):
        pairs = [(str(k), str(v)) for k, v in text.items()]
    else:
        pairs = []
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"{item[:80]!r} is not key=value")
            pairs.append((key.strip(), value.strip()))
            if len(pairs) > MAX_LABELS:
                break
    labels: dict[str, str] = {}
    for key, value in pairs:
        if not key:
            raise ValueError("a label has an empty key")
        if len(key) > MAX_LABEL or len(value) > MAX_LABEL:
            raise ValueError(
                f"label {key[:80]!r}: keys and values are at most {MAX_LABEL} characters"
            )
        if "\x00" in key or "\x00" in value:
            raise ValueError(f"label {key[:80]!r} holds a NUL character")
        if key in labels:
            raise ValueError(f"label {key!r} is given twice")
        labels[key] = value
    if len(pairs) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels")
    return labels


Detail = Annotated[dict[Annotated[str, text(128)], Any], Field(max_length=MAX_DETAIL_KEYS)]
"""A small map beside the facts (a result's detail, a command's args, extra metrics)."""


class ResultDetailValues(BaseModel):
    """The values of a result's ``detail`` that the Console stores, typed (other keys pass)."""

    model_config = ConfigDict(extra="ignore")

    new_version: VersionText | None = None


def _stored_values_typed(detail: dict[str, Any]) -> dict[str, Any]:
    ResultDetailValues.model_validate(detail)
    return detail


ResultDetail = Annotated[Detail, AfterValidator(_stored_values_typed)]
"""A command result's ``detail``: a :data:`Detail` whose ``new_version`` (stored on the rollout
target) is a :data:`VersionText` when present; a JSON object or a 600 KB string there fails the
message, as any field over its bound does."""

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
