"""The identity rules: who may enroll under a name, when a record's name may be freed, and
whether an agent is online. The seed's "Changing hostDataDir on a live cluster" section, made
exact; the Console enforces them, the flows predict them, :mod:`~fleet_policy.hostdatadir`
plans with them.

Times are ages in seconds. ``seconds_since_seen`` is the age of the record's last sign of life:
its last heartbeat, or its enrollment when it never heartbeat; ``None`` means no sign of life at
all (the record counts as quiet, and is never online).

Enrollment names ``(environment, agent_type, name)``; the record already holding it decides, in
this order (:func:`decide_enrollment`):

1. none                         → create a new record
2. same public key, not revoked → the same identity again (a retried request is harmless)
3. revoked                      → refuse ``agent_revoked``
4. released (holds no key)      → re-bind (``released``)
5. seen within the quiet window → refuse ``name_in_use`` (a second live process)
6. no identity evidence         → refuse ``no_identity_evidence``
7. no presented signal matches  → refuse ``identity_mismatch``
8. otherwise                    → re-bind (``quiet_with_evidence``)

Quiet means seen *more* than the window ago (the seed: "quiet for more than five minutes";
release "refuses … one seen in the last 5 minutes").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from contracts.vocabulary.agents import AgentStatus
from contracts.vocabulary.identities import ReleaseOutcome
from contracts.vocabulary.reasons import ErrorReason
from fleet_policy.ids import AgentId

__all__ = [
    "DEFAULT_QUIET_WINDOW_SECONDS",
    "DEFAULT_STALE_AFTER_SECONDS",
    "REBIND_REFUSALS",
    "EnrollmentAction",
    "EnrollmentClaim",
    "EnrollmentDecision",
    "HeldRecord",
    "RebindHow",
    "ReleaseDecision",
    "agent_status",
    "decide_enrollment",
    "decide_release",
    "is_online",
    "is_quiet",
    "rebind_refusals",
]

DEFAULT_QUIET_WINDOW_SECONDS: Final = 300.0
"""How long a record must be without a sign of life before enrollment re-binds it or
release-identity frees it (the Console's ``PROXIMA_IDENTITY_QUIET_SECONDS``; the seed's five
minutes)."""

DEFAULT_STALE_AFTER_SECONDS: Final = 90.0
"""An agent with no heartbeat for longer than this is offline (``PROXIMA_AGENT_STALE_SECONDS``)."""

REBIND_REFUSALS: Final = (
    ErrorReason.AGENT_REVOKED,
    ErrorReason.NAME_IN_USE,
    ErrorReason.NO_IDENTITY_EVIDENCE,
    ErrorReason.IDENTITY_MISMATCH,
)
"""The reasons a re-bind is refused, in the order the Console checks (and answers) them."""


def _check_window(name: str, seconds: float) -> None:
    if not seconds >= 0:
        raise ValueError(f"{name} must not be negative, got {seconds}")


def is_quiet(seconds_since_seen: float | None, quiet_window_seconds: float) -> bool:
    """Whether a record has been without a sign of life for *more* than the window."""
    _check_window("quiet_window_seconds", quiet_window_seconds)
    return seconds_since_seen is None or seconds_since_seen > quiet_window_seconds


def is_online(
    seconds_since_seen: float | None,
    *,
    stale_after_seconds: float,
    revoked: bool = False,
    holds_identity: bool = True,
) -> bool:
    """Whether an agent is online: it holds a live identity (not revoked, not released) and
    heartbeat within the stale timeout (the boundary counts as online)."""
    _check_window("stale_after_seconds", stale_after_seconds)
    return (
        not revoked
        and holds_identity
        and seconds_since_seen is not None
        and seconds_since_seen <= stale_after_seconds
    )


def agent_status(
    seconds_since_seen: float | None,
    *,
    stale_after_seconds: float,
    revoked: bool,
    holds_identity: bool,
) -> AgentStatus:
    """The status the Console shows: revoked, then released, then online or offline."""
    if revoked:
        return AgentStatus.REVOKED
    if not holds_identity:
        return AgentStatus.RELEASED
    if is_online(seconds_since_seen, stale_after_seconds=stale_after_seconds):
        return AgentStatus.ONLINE
    return AgentStatus.OFFLINE


@dataclass(frozen=True)
class HeldRecord:
    """The record holding a name. ``public_key`` is ``None`` once released; ``evidence`` is the
    identity signals it carries as ``(kind, value hash)`` pairs."""

    agent_id: AgentId
    public_key: str | None
    revoked: bool
    seconds_since_seen: float | None
    evidence: frozenset[tuple[str, str]] = frozenset()

    @property
    def released(self) -> bool:
        return self.public_key is None


@dataclass(frozen=True)
class EnrollmentClaim:
    """What the enrolling process presents: its key and its signals as ``(kind, value hash)``."""

    public_key: str
    signals: frozenset[tuple[str, str]] = frozenset()


class EnrollmentAction(StrEnum):
    CREATE = "create"
    SAME_IDENTITY = "same_identity"
    REBIND = "rebind"
    REFUSE = "refuse"


class RebindHow(StrEnum):
    """How a re-bind was earned (the Console records it on the ``rebound`` event)."""

    RELEASED = "released"
    QUIET_WITH_EVIDENCE = "quiet_with_evidence"


@dataclass(frozen=True)
class EnrollmentDecision:
    """``retire_key`` is the key a re-bind takes away from the record (None after a release)."""

    action: EnrollmentAction
    agent_id: AgentId | None = None
    how: RebindHow | None = None
    refusal: ErrorReason | None = None
    retire_key: str | None = None


def rebind_refusals(
    *, revoked: bool, quiet: bool, has_evidence: bool, signals_match: bool
) -> tuple[ErrorReason, ...]:
    """Every reason a re-bind onto a record that still holds a key is refused, in
    :data:`REBIND_REFUSALS` order (empty: it re-binds). ``quiet`` is whether the record is (or
    will be, for a plan) quiet; ``signals_match`` whether a presented signal is among its
    evidence."""
    found = {
        ErrorReason.AGENT_REVOKED: revoked,
        ErrorReason.NAME_IN_USE: not quiet,
        ErrorReason.NO_IDENTITY_EVIDENCE: not has_evidence,
        ErrorReason.IDENTITY_MISMATCH: not signals_match,
    }
    return tuple(reason for reason in REBIND_REFUSALS if found[reason])


def decide_enrollment(
    record: HeldRecord | None, claim: EnrollmentClaim, *, quiet_window_seconds: float
) -> EnrollmentDecision:
    """What an enrollment under a name does, given the record holding it (module docstring)."""
    _check_window("quiet_window_seconds", quiet_window_seconds)
    if record is None:
        return EnrollmentDecision(EnrollmentAction.CREATE)
    if record.public_key == claim.public_key and not record.revoked:
        return EnrollmentDecision(EnrollmentAction.SAME_IDENTITY, agent_id=record.agent_id)
    if record.revoked:
        return EnrollmentDecision(
            EnrollmentAction.REFUSE, agent_id=record.agent_id, refusal=ErrorReason.AGENT_REVOKED
        )
    if record.released:
        return EnrollmentDecision(
            EnrollmentAction.REBIND, agent_id=record.agent_id, how=RebindHow.RELEASED
        )
    refusals = rebind_refusals(
        revoked=record.revoked,
        quiet=is_quiet(record.seconds_since_seen, quiet_window_seconds),
        has_evidence=bool(record.evidence),
        signals_match=bool(record.evidence & claim.signals),
    )
    if refusals:
        return EnrollmentDecision(
            EnrollmentAction.REFUSE, agent_id=record.agent_id, refusal=refusals[0]
        )
    return EnrollmentDecision(
        EnrollmentAction.REBIND,
        agent_id=record.agent_id,
        how=RebindHow.QUIET_WITH_EVIDENCE,
        retire_key=record.public_key,
    )


@dataclass(frozen=True)
class ReleaseDecision:
    """``outcome`` is ``would_release``, ``already_released`` or ``refused`` (with ``refusal``);
    the Console releases on ``would_release`` and answers 200 on ``already_released``."""

    agent_id: AgentId
    outcome: ReleaseOutcome
    refusal: ErrorReason | None = None

    @property
    def releases(self) -> bool:
        return self.outcome is ReleaseOutcome.WOULD_RELEASE


def decide_release(record: HeldRecord, *, quiet_window_seconds: float) -> ReleaseDecision:
    """Whether release-identity frees ``record``'s name: never a revoked record, never one seen
    within the quiet window (a live agent's name is never freed underneath it)."""
    _check_window("quiet_window_seconds", quiet_window_seconds)
    if record.revoked:
        return ReleaseDecision(record.agent_id, ReleaseOutcome.REFUSED, ErrorReason.AGENT_REVOKED)
    if record.released:
        return ReleaseDecision(record.agent_id, ReleaseOutcome.ALREADY_RELEASED)
    if not is_quiet(record.seconds_since_seen, quiet_window_seconds):
        return ReleaseDecision(
            record.agent_id, ReleaseOutcome.REFUSED, ErrorReason.AGENT_RECENTLY_SEEN
        )
    return ReleaseDecision(record.agent_id, ReleaseOutcome.WOULD_RELEASE)
