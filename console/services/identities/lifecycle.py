"""Release, revoke and credential rotation of agent identities; fresh NATS credentials for a
current key.

Each use case changes the record in one unit of work and, once that has committed, waits for
NATS to enforce it (``apply_identities``): when the call returns, a retired key is refused.
"""

from __future__ import annotations

import asyncio
import secrets as pysecrets
from datetime import datetime, timedelta

from sqlmodel import Session, select

from console.auth import Principal
from console.core.audit_log import audit
from console.core.clock import utcnow
from console.core.signatures import SignatureError, verify
from console.errors import (
    BadRequestError,
    ConflictError,
    GatewayTimeoutError,
    NotFoundError,
    UnauthorizedError,
)
from console.models import Agent, CredentialRotation
from console.schemas import ReleaseAnswer, RotationResult
from console.services.agent_records import (
    add_event,
    is_online,
    load_agent,
    record_evidence,
    revoke_key,
    seen_at,
)
from console.services.identities.rebinding import rebound_refusal
from console.services.identities.signatures import check_signed
from console.services.presenters import agent_public
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.enrollment import (
    NatsCredentials,
    NatsCredentialsRequest,
    RotationAccepted,
    RotationProof,
    nats_credentials_message,
    rotation_message,
)
from contracts.messages import CommandKind
from contracts.views import AgentView
from contracts.vocabulary import ErrorReason, ReleaseOutcome, Scope
from rollout_policy import AgentId, HeldRecord, decide_release


def _held(agent: Agent, now: datetime) -> HeldRecord:
    return HeldRecord(
        agent_id=AgentId(agent.id),
        public_key=agent.nats_public_key,
        revoked=agent.revoked_at is not None,
        seconds_since_seen=(now - seen_at(agent)).total_seconds(),
    )


_REFUSED = {
    ErrorReason.AGENT_REVOKED: "agent {id} is revoked: a revoked identity is never released",
    ErrorReason.AGENT_RECENTLY_SEEN: "agent {id} was seen {quiet_for:.0f} s ago, within the "
    "{quiet:g} s quiet window: a live agent's name is never freed underneath it",
}


def release_identity(
    session: Session, *, agent: Agent, quiet_seconds: float, actor: str, now: datetime | None = None
) -> ReleaseOutcome:
    """Free the record's name (``rollout_policy.identities.decide_release`` decides): clear its
    NATS identity so the next enrollment re-binds it. Returns ``released`` or
    ``already_released``; a refusal is a 409 with its reason."""
    now = now or utcnow()
    held = _held(agent, now)
    decision = decide_release(held, quiet_window_seconds=quiet_seconds)
    if decision.refusal is not None:
        template = _REFUSED.get(decision.refusal, "agent {id}: release refused")
        raise ConflictError(
            decision.refusal,
            template.format(id=agent.id, quiet_for=held.seconds_since_seen, quiet=quiet_seconds),
            agent_id=agent.id,
        )
    if not decision.releases:
        return ReleaseOutcome.ALREADY_RELEASED
    assert agent.nats_public_key is not None
    revoke_key(
        session, agent_id=agent.id, public_key=agent.nats_public_key, reason="released", now=now
    )
    agent.nats_public_key = None
    agent.released_at = now
    agent.shared_identity_since = None
    agent.version_flapping_since = None
    session.add(agent)
    add_event(session, agent.id, "released", f"identity released by {actor}", actor=actor)
    return ReleaseOutcome.RELEASED


def revoke(session: Session, *, agent: Agent, actor: str, now: datetime | None = None) -> Agent:
    now = now or utcnow()
    if agent.revoked_at is None:
        if agent.nats_public_key is not None:
            revoke_key(
                session,
                agent_id=agent.id,
                public_key=agent.nats_public_key,
                reason="revoked",
                now=now,
            )
        agent.revoked_at = now
        session.add(agent)
        add_event(session, agent.id, "revoked", f"revoked by {actor}", actor=actor)
    return agent


def start_rotation(
    session: Session,
    *,
    agent: Agent,
    stale_seconds: float,
    timeout_seconds: float,
    now: datetime | None = None,
) -> CredentialRotation:
    now = now or utcnow()
    if agent.revoked_at is not None:
        raise ConflictError(
            ErrorReason.AGENT_REVOKED, f"agent {agent.id} is revoked", agent_id=agent.id
        )
    if agent.nats_public_key is None:
        raise ConflictError(
            ErrorReason.AGENT_RELEASED,
            f"agent {agent.id} holds no identity (released): nothing to rotate",
            agent_id=agent.id,
        )
    if not is_online(agent, stale_seconds=stale_seconds, now=now):
        raise ConflictError(
            ErrorReason.AGENT_OFFLINE,
            f"agent {agent.id} is offline: rotate-credentials needs the agent online holding "
            "its identity (it cannot recover an agent whose state is gone; use release-identity)",
            agent_id=agent.id,
        )
    rotation = CredentialRotation(
        agent_id=agent.id,
        nonce=pysecrets.token_urlsafe(24),
        created_at=now,
        expires_at=now + timedelta(seconds=timeout_seconds),
    )
    session.add(rotation)
    return rotation


def complete_rotation(
    session: Session, *, agent_id: str, proof: RotationProof, now: datetime | None = None
) -> Agent:
    """Accept the agent's new key when the old key signed it and the new key proves itself."""
    now = now or utcnow()
    rotation = session.exec(
        select(CredentialRotation).where(
            CredentialRotation.nonce == proof.nonce, CredentialRotation.agent_id == agent_id
        )
    ).first()
    if rotation is None or rotation.completed_at is not None:
        raise UnauthorizedError(
            ErrorReason.UNKNOWN_ROTATION, "no rotation in progress with this nonce"
        )
    if rotation.expires_at <= now:
        raise UnauthorizedError(ErrorReason.ROTATION_EXPIRED, "the rotation request has expired")
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFoundError(ErrorReason.AGENT_NOT_FOUND, f"agent {agent_id} not found")
    if agent.revoked_at is not None or agent.nats_public_key is None:
        raise ConflictError(
            ErrorReason.AGENT_NOT_ROTATABLE, f"agent {agent_id} holds no live identity"
        )
    message = rotation_message(
        agent_id=agent_id, nonce=proof.nonce, new_public_key=proof.new_public_key
    )
    try:
        verify(agent.nats_public_key, message, proof.old_signature)
    except SignatureError as exc:
        raise UnauthorizedError(
            ErrorReason.BAD_SIGNATURE, f"the current key did not sign the rotation: {exc.why}"
        ) from exc
    try:
        verify(proof.new_public_key, message, proof.new_signature)
    except SignatureError as exc:
        raise BadRequestError(
            ErrorReason.BAD_SIGNATURE, f"the new key did not sign the rotation: {exc.why}"
        ) from exc
    revoke_key(
        session, agent_id=agent.id, public_key=agent.nats_public_key, reason="rotated", now=now
    )
    agent.nats_public_key = proof.new_public_key
    agent.credentials_rotated_at = now
    agent.last_seen_at = now
    session.add(agent)
    rotation.completed_at = now
    rotation.new_public_key = proof.new_public_key
    session.add(rotation)
    record_evidence(
        session, agent_id=agent.id, signals=proof.signals, source="credential_renewal", now=now
    )
    add_event(
        session,
        agent.id,
        "credentials_rotated",
        "credentials rotated; evidence renewed",
        signals=sorted(proof.signals.present()),
    )
    return agent


def _actor(principal: Principal) -> str:
    return f"api token {principal.name!r}"


async def release(
    rt: ServiceRuntime, principal: Principal, agent_id: str, *, dry_run: bool = False
) -> ReleaseAnswer:
    """Free the record's name so the next enrollment re-binds it (same id, links, history).

    ``dry_run`` decides exactly as the real call (the same refusal, or the record as it would
    be once released, with ``outcome`` ``would_release``) and changes nothing."""
    settings = rt.settings

    def work(uow: UnitOfWork) -> ReleaseAnswer:
        agent = load_agent(uow.session, agent_id, principal, Scope.AGENTS_WRITE)
        outcome = release_identity(
            uow.session,
            agent=agent,
            quiet_seconds=settings.identity_quiet_seconds,
            actor=_actor(principal),
        )
        if dry_run and outcome is ReleaseOutcome.RELEASED:
            outcome = ReleaseOutcome.WOULD_RELEASE
        record = agent_public(agent, stale_seconds=settings.agent_stale_seconds)
        answer = ReleaseAnswer(
            **dict(record),
            agent_id=agent.id,
            outcome=outcome,
            message=_RELEASE_MESSAGE[outcome].format(id=agent.id),
            dry_run=dry_run,
        )
        if dry_run:
            uow.session.rollback()
        else:
            uow.after_commit(rt.apply_identities)
        return answer

    answer = await rt.units.run(work, write=not dry_run)
    if answer.outcome is ReleaseOutcome.RELEASED:
        audit("agent_released", agent_id=agent_id, by_token_id=principal.token_id)
    return answer


_RELEASE_MESSAGE = {
    ReleaseOutcome.RELEASED: "agent {id}'s name is free: the next enrollment under it re-binds "
    "the record, whatever evidence it presents, and the record's evidence becomes that machine's",
    ReleaseOutcome.WOULD_RELEASE: "agent {id} is quiet: release-identity would free its name for "
    "the next enrollment under it, whatever evidence it presents",
    ReleaseOutcome.ALREADY_RELEASED: "agent {id} holds no identity already (released)",
}


async def revoke_agent(rt: ServiceRuntime, principal: Principal, agent_id: str) -> AgentView:
    """Revoke the identity: its live NATS connection is cut and it is never re-bound."""

    def work(uow: UnitOfWork) -> AgentView:
        agent = load_agent(uow.session, agent_id, principal, Scope.AGENTS_WRITE)
        revoke(uow.session, agent=agent, actor=_actor(principal))
        uow.after_commit(rt.apply_identities)
        return agent_public(agent, stale_seconds=rt.settings.agent_stale_seconds)

    revoked = await rt.units.run(work, write=True)
    audit("agent_revoked", agent_id=agent_id, by_token_id=principal.token_id)
    return revoked


async def rotate_credentials(
    rt: ServiceRuntime, principal: Principal, agent_id: str
) -> RotationResult:
    """Ask the online agent for a new key, signed by its current one; wait for it to land.

    One unit of work records the rotation and, once committed, sends the command; then the
    call waits for the agent's proof (``accept_rotation``), woken at once in this process and
    polling for a proof accepted by another replica."""
    settings = rt.settings
    waiter = asyncio.Event()
    nonce_box: list[str] = []

    def begin(uow: UnitOfWork) -> None:
        agent = load_agent(uow.session, agent_id, principal, Scope.AGENTS_WRITE)
        rotation = start_rotation(
            uow.session,
            agent=agent,
            stale_seconds=settings.agent_stale_seconds,
            timeout_seconds=settings.rotation_timeout_seconds,
        )
        nonce_box.append(rotation.nonce)
        rt.rotation_waiters[rotation.nonce] = waiter

        async def send() -> None:
            await rt.send_command(
                agent_id, CommandKind.ROTATE_CREDENTIALS, {"nonce": rotation.nonce}
            )

        uow.after_commit(send)

    try:
        await rt.units.run(begin, write=True)
        audit("agent_rotation_started", agent_id=agent_id, by_token_id=principal.token_id)
        return await _await_rotation(rt, agent_id, nonce_box[0], waiter)
    finally:
        for nonce in nonce_box:
            rt.rotation_waiters.pop(nonce, None)


async def _await_rotation(
    rt: ServiceRuntime, agent_id: str, nonce: str, waiter: asyncio.Event
) -> RotationResult:
    timeout = rt.settings.rotation_timeout_seconds

    def done(uow: UnitOfWork) -> CredentialRotation | None:
        row = uow.session.exec(
            select(CredentialRotation).where(CredentialRotation.nonce == nonce)
        ).first()
        return row if row is not None and row.completed_at is not None else None

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        row = await rt.units.run(done)
        if row is not None:
            assert row.new_public_key and row.completed_at
            return RotationResult(
                agent_id=agent_id, public_key=row.new_public_key, rotated_at=row.completed_at
            )
        try:
            async with asyncio.timeout(0.5):
                await waiter.wait()
        except TimeoutError:
            pass
    raise GatewayTimeoutError(
        ErrorReason.ROTATION_TIMED_OUT,
        f"agent {agent_id} did not present a new key within {timeout:g} s",
        agent_id=agent_id,
    )


async def accept_rotation(
    rt: ServiceRuntime, agent_id: str, proof: RotationProof
) -> RotationAccepted:
    """The agent's proof: the new key replaces the old one once NATS refuses the old one."""

    def work(uow: UnitOfWork) -> tuple[str, str]:
        agent = complete_rotation(uow.session, agent_id=agent_id, proof=proof)
        uow.after_commit(rt.apply_identities)
        return agent.nats_public_key or "", agent.environment_id

    public_key, environment_id = await rt.units.run(work, write=True)
    audit("agent_rotated", agent_id=agent_id, public_key=public_key)
    waiter = rt.rotation_waiters.get(proof.nonce)
    if waiter is not None:
        waiter.set()
    return RotationAccepted(
        agent_id=agent_id,
        public_key=public_key,
        nats_jwt=await rt.agent_jwt(agent_id, public_key, environment_id),
    )


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
