"""Enrollment and re-bind: the identity rules of the chart's page, made exact.

An enrollment names (environment, agent_type, name). What happens depends on the record that
already holds that name; the rules are ``rollout_policy.identities.decide_enrollment`` (one home):
here they become HTTP answers — create 201, the same identity again or a re-bind 200 (same id,
links and history), a refusal 409 with its ``ErrorReason``.

The rule functions take the session and leave the transaction to the unit of work, which also
commits when a conflict must be recorded even though the request fails (``enroll_agent``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import Histogram
from sqlalchemy import Insert, bindparam, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from console.core.audit_log import Field as AuditField
from console.core.audit_log import audit
from console.core.clock import utcnow
from console.core.secrets import evidence_hash
from console.errors import (
    ConflictError,
    ConsoleError,
    ForbiddenError,
    UnauthorizedError,
)
from console.models import Agent, AgentEvidence, new_id, table_of
from console.services.agent_records import (
    add_event,
    append_rows,
    record_evidence,
    revoke_key,
    seen_at,
)
from console.services.identities.enrollment_facts import (
    Facts,
    TokenView,
    count_use,
    lock_holder,
    read_facts,
)
from console.services.identities.enrollment_refusals import record_conflict, refusal
from console.services.identities.rebinding import (
    cancel_in_flight,
    handover,
    replace_evidence,
)
from console.services.identities.signatures import check_signed
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    enrollment_message_of,
)
from contracts.vocabulary import AgentType, ErrorReason
from rollout_policy import (
    AgentId,
    EnrollmentAction,
    EnrollmentClaim,
    EnrollmentDecision,
    HeldRecord,
    RebindHow,
    decide_enrollment,
)

ENROLL_DB_SECONDS = Histogram(
    "proxima_enroll_db_seconds",
    "Enrollment: the database transaction",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
ENROLL_APPLY_SECONDS = Histogram(
    "proxima_enroll_nats_apply_seconds",
    "Enrollment: waiting for NATS to enforce the new key",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)


@dataclass(frozen=True, slots=True)
class EnrolledRecord:
    """What the answer to an enrollment names of the record."""

    id: str
    agent_type: str
    name: str
    client_id: str
    environment_id: str
    nats_public_key: str | None

    @classmethod
    def of(cls, agent: Agent) -> EnrolledRecord:
        return cls(
            agent.id,
            agent.agent_type,
            agent.name,
            agent.client_id,
            agent.environment_id,
            agent.nats_public_key,
        )


@dataclass(frozen=True, slots=True)
class EnrollOutcome:
    agent: EnrolledRecord
    created: bool
    rebound: bool
    revoked_key: bool = False
    how: RebindHow | None = None
    handed_over: dict[str, AuditField] = field(default_factory=dict)


_EVIDENCE_OF = select(AgentEvidence).where(AgentEvidence.agent_id == bindparam("agent_id"))
_INSERT_AGENT: Insert = insert(table_of(Agent))


def _check_uses(token: TokenView) -> None:
    if token.max_uses is not None and token.uses >= token.max_uses:
        raise _exhausted(token.uses, token.max_uses)


def _exhausted(uses: int, max_uses: int) -> UnauthorizedError:
    return UnauthorizedError(
        ErrorReason.INSTALL_TOKEN_EXHAUSTED,
        f"install token has been used {uses} times of {max_uses}",
    )


class TokenUsedUpMeanwhile(Exception):
    """The token's last use was taken by an enrollment that committed after this one read it.
    Not a ``ConsoleError``, so the unit rolls back what this enrollment wrote; the caller
    answers as ``_check_uses`` does."""

    def __init__(self, token: TokenView) -> None:
        super().__init__(token.id)
        self.max_uses = token.max_uses or 0


def _held(session: Session, agent: Agent, now: datetime) -> HeldRecord:
    """The record holding the name, as the identity rules see it."""
    rows = session.exec(_EVIDENCE_OF, params={"agent_id": agent.id}).all()
    return HeldRecord(
        agent_id=AgentId(agent.id),
        public_key=agent.nats_public_key,
        revoked=agent.revoked_at is not None,
        seconds_since_seen=(now - seen_at(agent)).total_seconds(),
        evidence=frozenset((r.kind, r.value_hash) for r in rows),
    )


def _claim(req: EnrollRequest, token: TokenView) -> EnrollmentClaim:
    return EnrollmentClaim(
        public_key=req.public_key,
        signals=frozenset((k, evidence_hash(k, v)) for k, v in req.signals.present().items()),
        agent_type=req.agent_type,
        cluster_bound_token=token.cluster_slug is not None,
    )


def _check_key_free(facts: Facts, existing: Agent | None) -> None:
    """Keys are unique across all records, and a key once taken away never comes back: not
    under another name, not in another environment or tenant."""
    if facts.key_retired:
        raise ConflictError(
            ErrorReason.PUBLIC_KEY_RETIRED,
            "this public key was taken away (revoked, released, rotated or re-bound) and can "
            "never enroll again: generate a new key",
        )
    holder_id = facts.key_holder_id
    if holder_id is not None and (existing is None or holder_id != existing.id):
        raise ConflictError(
            ErrorReason.PUBLIC_KEY_IN_USE,
            "another record holds this public key; every identity has its own key",
        )


@dataclass(frozen=True, slots=True)
class Decided:
    """An enrollment's facts and the identity rules' decision on them."""

    facts: Facts
    existing: Agent | None
    held: HeldRecord | None
    claim: EnrollmentClaim
    decision: EnrollmentDecision


def decide(
    session: Session,
    *,
    req: EnrollRequest,
    quiet_seconds: float,
    skew_seconds: float,
    now: datetime,
    lock: bool = True,
) -> Decided:
    """Check the proof and the token, read the record holding the name (locked, unless for a
    dry run) and ask ``decide_enrollment``; raise every refusal but the name's own (a
    ``REFUSE`` decision), which the caller answers (and, for a real call, records)."""
    check_signed(
        req.public_key,
        enrollment_message_of(req),
        req.signature,
        signed_at=req.signed_at,
        now=now,
        skew_seconds=skew_seconds,
    )
    facts = read_facts(session, req, now)
    token = facts.token
    existing = None
    if facts.holder_id is not None:
        existing = lock_holder(session, facts, req) if lock else session.get(Agent, facts.holder_id)
    held = None if existing is None else _held(session, existing, now)
    claim = _claim(req, token)
    decision = decide_enrollment(held, claim, quiet_window_seconds=quiet_seconds)
    if decision.refusal is ErrorReason.INSTALL_TOKEN_SCOPE:
        raise ForbiddenError(
            ErrorReason.INSTALL_TOKEN_SCOPE,
            f"install token {token.prefix}… is bound to cluster {token.cluster_slug!r}: it "
            f"enrolls only Kubernetes agents, not {req.agent_type.value}",
        )
    if decision.action is not EnrollmentAction.SAME_IDENTITY:
        _check_uses(token)
    if decision.action in (EnrollmentAction.CREATE, EnrollmentAction.REBIND):
        _check_key_free(facts, existing)
    return Decided(facts, existing, held, claim, decision)


def enroll(
    session: Session,
    *,
    req: EnrollRequest,
    quiet_seconds: float,
    skew_seconds: float,
    now: datetime | None = None,
) -> EnrollOutcome:
    now = now or utcnow()
    decided = decide(
        session, req=req, quiet_seconds=quiet_seconds, skew_seconds=skew_seconds, now=now
    )
    token, existing, decision = decided.facts.token, decided.existing, decided.decision
    if decision.action is EnrollmentAction.SAME_IDENTITY:
        # The same key again (its holder proved it): a re-delivery of an enrollment whose
        # answer, or whose state file, was lost — the same record, no token use counted.
        assert existing is not None
        return EnrollOutcome(agent=EnrolledRecord.of(existing), created=False, rebound=False)
    if decision.action is EnrollmentAction.REFUSE:
        held = decided.held
        assert existing is not None and held is not None and decision.refusal is not None
        conflict = refusal(decision.refusal, existing, held, quiet_seconds, decided.claim)
        record_conflict(session, existing, conflict, now)
        raise conflict
    if decision.action is EnrollmentAction.CREATE:
        outcome = _create(session, req, token, now)
    else:
        assert existing is not None and decided.held is not None
        outcome = _rebind(session, existing, req, token, now, decided)
    # The token's use last: its row is the one every enrollment of the token updates, so its
    # lock is held only from here to the commit (docs/performance.md).
    if not count_use(session, token, now):
        raise TokenUsedUpMeanwhile(token)
    return outcome


def _create(session: Session, req: EnrollRequest, token: TokenView, now: datetime) -> EnrollOutcome:
    """A new record, its evidence and its first history event: Core INSERTs (no ORM objects:
    this runs on every enrollment, under the writer lock)."""
    record = EnrolledRecord(
        id=new_id(),
        agent_type=req.agent_type.value,
        name=req.name,
        client_id=token.client_id,
        environment_id=token.environment_id,
        nats_public_key=req.public_key,
    )
    try:
        append_rows(
            session,
            _INSERT_AGENT,
            [
                {
                    "id": record.id,
                    "client_id": record.client_id,
                    "environment_id": record.environment_id,
                    "agent_type": record.agent_type,
                    "name": record.name,
                    "nats_public_key": record.nats_public_key,
                    "version": req.version,
                    "instance_id": req.instance_id,
                    "can_self_update": req.can_self_update,
                    "labels": dict(req.labels),
                    "install_token_id": token.id,
                    "enrolled_at": now,
                    "last_seen_at": now,
                }
            ],
        )
    except IntegrityError as exc:
        session.rollback()
        raise ConflictError(
            ErrorReason.NAME_IN_USE,
            f"{req.agent_type.value} {req.name!r} was enrolled by another request just now",
        ) from exc
    record_evidence(
        session,
        agent_id=record.id,
        signals=req.signals,
        source="enrollment",
        now=now,
        new_record=True,
    )
    add_event(
        session,
        record.id,
        "enrolled",
        f"enrolled as {req.agent_type.value} {req.name!r}",
        version=req.version,
        signals=sorted(req.signals.present()),
    )
    return EnrollOutcome(agent=record, created=True, rebound=False)


def _rebind(
    session: Session,
    existing: Agent,
    req: EnrollRequest,
    token: TokenView,
    now: datetime,
    decided: Decided,
) -> EnrollOutcome:
    how = decided.decision.how
    assert how is not None and decided.held is not None
    handed_over: dict[str, AuditField] = {}
    if decided.decision.replaces_evidence:
        # Read before anything changes: the release and the evidence the record held.
        handed_over = handover(session, existing, decided.held.evidence, decided.claim.signals)
        replace_evidence(session, existing.id, decided.claim.signals)
    replaced = existing.nats_public_key
    if replaced is not None:
        revoke_key(session, agent_id=existing.id, public_key=replaced, reason="rebound", now=now)
    ended = cancel_in_flight(session, existing, now)
    if how is RebindHow.QUIET_WITH_EVIDENCE:
        existing.rebound_at = now
    existing.nats_public_key = req.public_key
    existing.version = req.version
    existing.instance_id = req.instance_id
    existing.can_self_update = req.can_self_update
    existing.self_update_blocker = None  # known again from the next heartbeat
    existing.labels = dict(req.labels) or existing.labels
    existing.released_at = None
    existing.last_seen_at = now
    existing.last_conflict_at = None
    existing.last_conflict_reason = None
    existing.shared_identity_since = None
    existing.version_flapping_since = None
    existing.install_token_id = token.id
    session.add(existing)
    record_evidence(
        session, agent_id=existing.id, signals=req.signals, source="enrollment", now=now
    )
    if how is RebindHow.RELEASED:
        message = (
            f"re-bound onto its prior record after release (released by "
            f"{handed_over.get('released_by') or 'an operator'}); its identity evidence is now "
            "this machine's"
        )
    else:
        message = "re-bound onto its prior record (quiet, identity evidence matched)"
    add_event(
        session,
        existing.id,
        "rebound",
        message,
        how=how.value,
        version=req.version,
        retired_key=replaced,
        install_token=token.prefix,
        **handed_over,
        **ended,
    )
    return EnrollOutcome(
        agent=EnrolledRecord.of(existing),
        created=False,
        rebound=True,
        revoked_key=replaced is not None,
        how=how,
        handed_over=handed_over,
    )


async def enroll_agent(
    rt: ServiceRuntime,
    req: EnrollRequest,
    *,
    guard: Callable[[UnitOfWork], None] | None = None,
    seen: Mapping[str, AuditField] | None = None,
) -> tuple[EnrollResponse, bool]:
    """Enroll or re-bind; the answer and whether a new record was made. A re-bind that retired
    the record's previous key returns once NATS refuses that key. The audit line names what
    happened, with ``seen`` (where the request came from); a re-bind after release names the
    release and both machines' evidence by kind.

    ``guard`` (the rate limits) is kept even when the enrollment is refused. With one writer at
    a time (SQLite) it runs first in the enrollment's own transaction, saving a commit: that is
    sound because ``enroll`` raises its refusals before it writes anything — except the clash
    it records on purpose — so committing on a ``ConsoleError`` keeps only the guard's counts
    and that record. With concurrent writers (PostgreSQL) it runs in a unit of its own, committed
    at once: its counters are rows every enrollment of a token and an address updates, and
    counted inside the enrollment each row's lock was held for the whole enrollment, so
    concurrent enrollments queued on it (p99 400-500 ms at concurrency 16, docs/performance.md)."""
    settings = rt.settings
    started = time.perf_counter()
    if guard is not None and not rt.units.serializes_writes:
        await rt.units.run(guard, write=True, commit_on=(ConsoleError,))
        guard = None

    def work(uow: UnitOfWork) -> EnrollOutcome:
        if guard is not None:
            guard(uow)
        outcome = enroll(
            uow.session,
            req=req,
            quiet_seconds=settings.identity_quiet_seconds,
            skew_seconds=settings.enroll_clock_skew_seconds,
        )
        uow.after_commit(_observe_db(started))
        if outcome.revoked_key:
            uow.after_commit(_timed_apply(rt))
        return outcome

    # A conflict is kept on the record holding the name, and the guard's counts, even though the
    # request fails.
    try:
        outcome = await rt.units.run(work, write=True, commit_on=(ConsoleError,))
    except TokenUsedUpMeanwhile as lost:
        raise _exhausted(lost.max_uses, lost.max_uses) from None
    agent = outcome.agent
    audit(
        "agent_rebound"
        if outcome.rebound
        else "agent_enrolled"
        if outcome.created
        else "agent_reenrolled",
        agent_id=agent.id,
        environment_id=agent.environment_id,
        **(seen or {}),
        **({"how": outcome.how.value} if outcome.how else {}),
        **outcome.handed_over,
    )
    response = EnrollResponse(
        agent_id=agent.id,
        agent_type=AgentType(agent.agent_type),
        name=agent.name,
        client_id=agent.client_id,
        environment_id=agent.environment_id,
        nats_url=rt.agent_nats_url,
        nats_jwt=await rt.agent_jwt(agent.id, agent.nats_public_key or "", agent.environment_id),
        rebound=outcome.rebound,
    )
    return response, outcome.created


def _observe_db(started: float):  # type: ignore[no-untyped-def]
    async def observe() -> None:
        ENROLL_DB_SECONDS.observe(time.perf_counter() - started)

    return observe


def _timed_apply(rt: ServiceRuntime):  # type: ignore[no-untyped-def]
    async def apply() -> None:
        with ENROLL_APPLY_SECONDS.time():
            await rt.apply_identities()

    return apply
