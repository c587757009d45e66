"""Semver-ish versions and ranges like ``>=0.7.0,<0.9.0``.

Precedence follows SemVer 2.0: numeric parts compare as numbers, a pre-release sorts before its
release (``0.9.0-rc.1 < 0.9.0``), and build metadata (``+abc``) is kept but ignored when
comparing. Leniencies, because agents report versions written by people: a leading ``v``, and a
missing minor or patch part counts as 0 (``0.8`` is ``0.8.0``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from enum import StrEnum

from contracts.vocabulary.versions import MAX_VERSION_LENGTH, VERSION_PATTERN
from rollout_policy.errors import VersionError, VersionRangeError

_VERSION = re.compile(VERSION_PATTERN)

# A pre-release identifier as a sortable key: numeric identifiers sort before alphanumeric ones.
_PreKey = tuple[int, int, str]


def _pre_key(part: str) -> _PreKey:
    return (0, int(part), "") if part.isdigit() else (1, 0, part)


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A parsed version. Compare with ``<``/``==``; ``build`` never affects the result."""

    major: int
    minor: int = 0
    patch: int = 0
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @property
    def _key(self) -> tuple[int, int, int, int, tuple[_PreKey, ...]]:
        # A release (no pre-release) outranks every pre-release of the same numbers.
        return (
            self.major,
            self.minor,
            self.patch,
            0 if self.prerelease else 1,
            tuple(_pre_key(p) for p in self.prerelease),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key < other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def parse_version(text: str) -> Version:
    """``text`` as a :class:`Version`; raises :class:`VersionError` if it is not one.

    Longer than ``MAX_VERSION_LENGTH`` is not a version: the bound comes before ``int()``,
    which raises a bare ``ValueError`` past 4,300 digits (an agent's heartbeat once made every
    rollout of its environment answer 500 that way)."""
    stripped = text.strip()
    if len(stripped) > MAX_VERSION_LENGTH:
        raise VersionError(
            text[:MAX_VERSION_LENGTH] + "…",
            f"invalid version: longer than {MAX_VERSION_LENGTH} characters ({len(stripped)})",
        )
    match = _VERSION.match(stripped)
    if match is None:
        raise VersionError(text)
    pre = match.group("pre")
    build = match.group("build")
    return Version(
        major=int(match.group("major")),
        minor=int(match.group("minor") or 0),
        patch=int(match.group("patch") or 0),
        prerelease=tuple(pre.split(".")) if pre else (),
        build=tuple(build.split(".")) if build else (),
    )


def try_parse_version(text: str | None) -> Version | None:
    """Like :func:`parse_version`, but ``None`` for a missing or unparseable version."""
    if text is None:
        return None
    try:
        return parse_version(text)
    except VersionError:
        return None


class Comparison(StrEnum):
    EQ = "=="
    NE = "!="
    GE = ">="
    LE = "<="
    GT = ">"
    LT = "<"


_CLAUSE = re.compile(r"^(==|!=|>=|<=|>|<|=)?\s*(\S+)$")


@dataclass(frozen=True)
class VersionClause:
    """One comparison in a range, e.g. ``>=0.7.0``."""

    op: Comparison
    version: Version

    def contains(self, version: Version) -> bool:
        match self.op:
            case Comparison.EQ:
                return version == self.version
            case Comparison.NE:
                return version != self.version
            case Comparison.GE:
                return version >= self.version
            case Comparison.LE:
                return version <= self.version
            case Comparison.GT:
                return version > self.version
            case Comparison.LT:
                return version < self.version

    def __str__(self) -> str:
        return f"{self.op.value}{self.version}"


@dataclass(frozen=True)
class VersionRange:
    """All clauses must hold. No clauses: every version is in range."""

    clauses: tuple[VersionClause, ...] = field(default=())

    def contains(self, version: Version) -> bool:
        return all(clause.contains(version) for clause in self.clauses)

    @property
    def is_any(self) -> bool:
        return not self.clauses

    def __str__(self) -> str:
        return ",".join(str(clause) for clause in self.clauses) or "*"


ANY_VERSION = VersionRange()


def parse_version_range(text: str) -> VersionRange:
    """``>=0.7.0,<0.9.0`` as a :class:`VersionRange`.

    Clauses are separated by commas and all must hold. A bare version (or ``=``) means ``==``.
    An empty text or ``*`` is any version. Raises :class:`VersionRangeError`.
    """
    stripped = text.strip()
    if stripped in ("", "*"):
        return ANY_VERSION
    clauses: list[VersionClause] = []
    for raw in stripped.split(","):
        clause = raw.strip()
        match = _CLAUSE.match(clause)
        if match is None:
            raise VersionRangeError(text, clause)
        op_text, version_text = match.groups()
        try:
            version = parse_version(version_text)
        except VersionError:
            raise VersionRangeError(text, clause) from None
        op = Comparison.EQ if op_text in (None, "=") else Comparison(op_text)
        clauses.append(VersionClause(op=op, version=version))
    return VersionRange(clauses=tuple(clauses))
