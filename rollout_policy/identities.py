"""The identity rules: who may enroll under a name, when a record's name may be freed, and
whether an agent is online. The chart's page's "Changing hostDataDir on a live cluster" section,
made exact; the Console enforces them, the flows predict them, :mod:`~rollout_policy.hostdatadir`
plans with them.

Times are ages in seconds. ``seconds_since_seen`` is the age of the record's last sign of life:
its last heartbeat, or its enrollment when it never heartbeat; ``None`` means no sign of life at
all (the record counts as quiet, and is never online).

Enrollment names ``(environment, agent_type, name)``; the record already holding it decides, in
this order (:func:`decide_enrollment`):

0. the install token may not enroll this agent type → refuse ``install_token_scope`` (a
   cluster-bound token enrolls only the Kubernetes agents of its cluster, :func:`token_may_enroll`)
1. none                         → create a new record
2. same public key, not revoked → the same identity again (a retried request is harmless)
3. revoked                      → refuse ``agent_revoked``
4. released (holds no key)      → re-bind (``released``) whatever evidence the claim presents:
   the release is the operator's override, and the record's evidence becomes the claim's
   (``replaces_evidence``)
5. seen within the quiet window → refuse ``name_in_use`` (a second live process)
6. no identity evidence         → refuse ``no_identity_evidence``
7. the presented signals do not cover the record's evidence → refuse ``identity_mismatch``:
   for *every kind* of evidence the record holds (machine-id, DMI product uuid) the claim must
   present a value of that kind the record holds (:func:`evidence_matches`). One matching
   world-readable machine-id is not enough when the record also holds the root-only DMI uuid.
8. otherwise                    → re-bind (``quiet_with_evidence``)

Quiet means seen *more* than the window ago (the chart's page: "quiet for more than five
minutes"; release "refuses … one seen in the last 5 minutes"). Release clears the NATS identity
"so the next enrollment re-binds the same record": the one way to hand a name to a machine whose
evidence changed, or to a new machine taking it over. Without a release, rules 5 to 8 hold exactly:
a machine presenting other evidence is refused ``identity_mismatch`` however long it retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from contracts.vocabulary import AgentStatus, AgentType
from contracts.vocabulary.identities import EnrollmentAction, RebindHow, ReleaseOutcome
from contracts.vocabulary.reasons import ErrorReason
from rollout_policy.ids import AgentId

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
    "evidence_matches",
    "is_online",
    "is_quiet",
    "missing_evidence_kinds",
    "online_cutoff",
    "rebind_refusals",
    "token_may_enroll",
]

DEFAULT_QUIET_WINDOW_SECONDS: Final = 300.0
"""How long a record must be without a sign of life before enrollment re-binds it or
release-identity frees it (the Console's ``PROXIMA_IDENTITY_QUIET_SECONDS``; the chart's page's
five minutes)."""

DEFAULT_STALE_AFTER_SECONDS: Final = 70.0
"""An agent with no heartbeat for longer than this is offline (``PROXIMA_AGENT_STALE_SECONDS``):
two missed beats of the default 30 s interval plus 10 s of grace, so a stopped agent is shown
offline within 75 s of its last heartbeat (status is computed when asked, no sweep adds to it)."""

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


def online_cutoff(now: datetime, *, stale_after_seconds: float) -> datetime:
    """The oldest last sign of life that still counts as online at ``now``: ``is_online``'s
    rule as an instant, for a database to compare ``last_seen_at`` with (seen at or after the
    cutoff is online, the boundary included, exactly as ``is_online`` decides)."""
    _check_window("stale_after_seconds", stale_after_seconds)
    return now - timedelta(seconds=stale_after_seconds)


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
    """What the enrolling process presents: its key and its signals as ``(kind, value hash)``,
    the agent type it enrolls as and whether its install token is bound to a cluster."""

    public_key: str
    signals: frozenset[tuple[str, str]] = frozenset()
    agent_type: AgentType | None = None
    cluster_bound_token: bool = False


CLUSTER_TOKEN_TYPES: Final = frozenset(
    {AgentType.K8S_NODE_MONITOR, AgentType.K8S_CLUSTER_COLLECTOR}
)
"""What a cluster-bound install token (the one the Helm chart carries) may enroll."""


def token_may_enroll(agent_type: AgentType | None, *, cluster_bound: bool) -> bool:
    """Whether an install token may enroll (create or re-bind) an agent of ``agent_type``: an
    environment-wide token any type, a cluster-bound one only the Kubernetes agents."""
    return not cluster_bound or agent_type in CLUSTER_TOKEN_TYPES


def missing_evidence_kinds(
    evidence: frozenset[tuple[str, str]], presented: frozenset[tuple[str, str]]
) -> frozenset[str]:
    """The kinds of evidence a record holds for which ``presented`` has no matching value."""
    held_kinds = {kind for kind, _ in evidence}
    matched = {kind for kind, _ in evidence & presented}
    return frozenset(held_kinds - matched)


def evidence_matches(
    evidence: frozenset[tuple[str, str]], presented: frozenset[tuple[str, str]]
) -> bool:
    """Whether ``presented`` covers the record's evidence: some held value of *every* kind the
    record holds (empty evidence is never matched: :func:`rebind_refusals` refuses it apart)."""
    return bool(evidence) and not missing_evidence_kinds(evidence, presented)


@dataclass(frozen=True)
class EnrollmentDecision:
    """``retire_key`` is the key a re-bind takes away from the record (None after a release);
    ``replaces_evidence``: the record's identity evidence becomes exactly what the claim presents
    (a re-bind after release), instead of gaining it."""

    action: EnrollmentAction
    agent_id: AgentId | None = None
    how: RebindHow | None = None
    refusal: ErrorReason | None = None
    retire_key: str | None = None
    replaces_evidence: bool = False


def rebind_refusals(
    *, revoked: bool, quiet: bool, has_evidence: bool, signals_match: bool
) -> tuple[ErrorReason, ...]:
    """Every reason a re-bind onto a record that still holds a key is refused, in
    :data:`REBIND_REFUSALS` order (empty: it re-binds). ``quiet`` is whether the record is (or
    will be, for a plan) quiet; ``signals_match`` whether the presented signals cover its
    evidence (:func:`evidence_matches`: a value of every kind it holds)."""
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
    if not token_may_enroll(claim.agent_type, cluster_bound=claim.cluster_bound_token):
        return EnrollmentDecision(
            EnrollmentAction.REFUSE,
            agent_id=None if record is None else record.agent_id,
            refusal=ErrorReason.INSTALL_TOKEN_SCOPE,
        )
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
            EnrollmentAction.REBIND,
            agent_id=record.agent_id,
            how=RebindHow.RELEASED,
            replaces_evidence=True,
        )
    refusals = rebind_refusals(
        revoked=record.revoked,
        quiet=is_quiet(record.seconds_since_seen, quiet_window_seconds),
        has_evidence=bool(record.evidence),
        signals_match=evidence_matches(record.evidence, claim.signals),
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
