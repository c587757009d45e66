"""Enrollment and re-bind: the identity rules of the seed, made exact.

An enrollment names (environment, agent_type, name). What happens depends on the record that
already holds that name; the rules are ``rollout_policy.identities.decide_enrollment`` (one home):
here they become HTTP answers — create 201, the same identity again or a re-bind 200 (same id,
links and history), a refusal 409 with its ``ErrorReason``.

The rule functions take the session and leave the transaction to the unit of work, which also
commits when a conflict must be recorded even though the request fails (``enroll_agent``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import Histogram
from sqlalchemy import Insert, bindparam, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from console.core.clock import utcnow
from console.core.secrets import evidence_hash
from console.core.signatures import SignatureError, verify
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
from console.services.enrollment_facts import (
    Facts,
    TokenView,
    count_use,
    lock_holder,
    read_facts,
)
from console.services.enrollment_refusals import record_conflict, refusal
from console.services.rebinding import cancel_in_flight, rebound_refusal
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.agent_types import AgentType
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    NatsCredentials,
    NatsCredentialsRequest,
    enrollment_message_of,
    nats_credentials_message,
)
from contracts.vocabulary import ErrorReason
from rollout_policy import AgentId
from rollout_policy.identities import (
    EnrollmentAction,
    EnrollmentClaim,
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


def check_signed(
    public_key: str,
    message: bytes,
    signature: str,
    *,
    signed_at: datetime,
    now: datetime,
    skew_seconds: float,
) -> None:
    """The one check of an agent's signed request (enrollment, NATS credentials): signed
    within ``skew_seconds`` of the Console's clock, by ``public_key``. Either failure is an
    authentication failure: 401 ``stale_signature`` or ``bad_signature``."""
    signed_at = signed_at if signed_at.tzinfo else signed_at.replace(tzinfo=UTC)
    if abs((now - signed_at).total_seconds()) > skew_seconds:
        raise UnauthorizedError(
            ErrorReason.STALE_SIGNATURE,
            f"the request was signed at {signed_at.isoformat()}, more than {skew_seconds:g} s "
            "from the Console's clock: check the agent's clock",
        )
    try:
        verify(public_key, message, signature)
    except SignatureError as exc:
        raise UnauthorizedError(
            ErrorReason.BAD_SIGNATURE,
            f"the signature does not prove possession of the key: {exc.why}",
        ) from exc


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


def enroll(
    session: Session,
    *,
    req: EnrollRequest,
    quiet_seconds: float,
    skew_seconds: float,
    now: datetime | None = None,
) -> EnrollOutcome:
    now = now or utcnow()
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
    existing = None if facts.holder_id is None else lock_holder(session, facts, req)

    held = None if existing is None else _held(session, existing, now)
    claim = _claim(req, token)
    decision = decide_enrollment(held, claim, quiet_window_seconds=quiet_seconds)
    if decision.refusal is ErrorReason.INSTALL_TOKEN_SCOPE:
        raise ForbiddenError(
            ErrorReason.INSTALL_TOKEN_SCOPE,
            f"install token {token.prefix}… is bound to cluster {token.cluster_slug!r}: it "
            f"enrolls only Kubernetes agents, not {req.agent_type.value}",
        )
    if decision.action is EnrollmentAction.SAME_IDENTITY:
        # The same key again (its holder proved it): a re-delivery of an enrollment whose
        # answer, or whose state file, was lost — the same record, no token use counted.
        assert existing is not None
        return EnrollOutcome(agent=EnrolledRecord.of(existing), created=False, rebound=False)
    _check_uses(token)
    if decision.action in (EnrollmentAction.CREATE, EnrollmentAction.REBIND):
        _check_key_free(facts, existing)
    if decision.action is EnrollmentAction.REFUSE:
        assert existing is not None and held is not None and decision.refusal is not None
        conflict = refusal(decision.refusal, existing, held, quiet_seconds, claim)
        record_conflict(session, existing, conflict, now)
        raise conflict
    if decision.action is EnrollmentAction.CREATE:
        outcome = _create(session, req, token, now)
    else:
        assert existing is not None and decision.how is not None
        outcome = _rebind(session, existing, req, token, now, decision.how)
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
    how: RebindHow,
) -> EnrollOutcome:
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
    add_event(
        session,
        existing.id,
        "rebound",
        "re-bound onto its prior record"
        + (
            " after release" if how is RebindHow.RELEASED else " (quiet, identity evidence matched)"
        ),
        how=how.value,
        version=req.version,
        retired_key=replaced,
        install_token=token.prefix,
        **ended,
    )
    return EnrollOutcome(
        agent=EnrolledRecord.of(existing),
        created=False,
        rebound=True,
        revoked_key=replaced is not None,
    )


def find_by_public_key(session: Session, public_key: str) -> Agent | None:
    return session.exec(select(Agent).where(col(Agent.nats_public_key) == public_key)).first()


async def enroll_agent(
    rt: ServiceRuntime, req: EnrollRequest, *, guard: Callable[[UnitOfWork], None] | None = None
) -> tuple[EnrollResponse, bool]:
    """Enroll or re-bind; the answer and whether a new record was made. A re-bind that retired
    the record's previous key returns once NATS refuses that key.

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


async def nats_credentials(
    rt: ServiceRuntime, agent_id: str, body: NatsCredentialsRequest
) -> NatsCredentials:
    """A fresh NATS user JWT for the agent's current key, proven by a signature of that key."""
    check_signed(
        body.public_key,
        nats_credentials_message(
            agent_id=agent_id, public_key=body.public_key, signed_at=body.signed_at
        ),
        body.signature,
        signed_at=body.signed_at,
        now=utcnow(),
        skew_seconds=rt.settings.enroll_clock_skew_seconds,
    )

    def look(uow: UnitOfWork) -> tuple[Agent | None, str | None]:
        return uow.session.get(Agent, agent_id), rebound_refusal(
            uow.session, agent_id, body.public_key
        )

    agent, rebound = await rt.units.run(look)
    if rebound is not None:
        raise UnauthorizedError(ErrorReason.IDENTITY_REBOUND, rebound)
    if agent is None or agent.nats_public_key != body.public_key or agent.revoked_at is not None:
        raise UnauthorizedError(
            ErrorReason.NOT_CURRENT_KEY,
            "this key is not the current key of a live identity (released, rotated away or "
            "revoked)",
        )
    return NatsCredentials(
        agent_id=agent_id,
        public_key=body.public_key,
        nats_url=rt.agent_nats_url,
        nats_jwt=await rt.agent_jwt(agent_id, body.public_key, agent.environment_id),
    )
