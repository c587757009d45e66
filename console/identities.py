"""Release, revoke and credential rotation of agent identities."""

from __future__ import annotations

import secrets as pysecrets
from datetime import datetime, timedelta

from sqlmodel import Session, select

from console.core.clock import utcnow
from console.core.signatures import SignatureError, verify
from console.enrollment import add_event, record_evidence, revoke_key, seen_at
from console.errors import BadRequestError, ConflictError, NotFoundError, UnauthorizedError
from console.models import Agent, CredentialRotation
from contracts.enrollment import RotationProof, rotation_message
from contracts.vocabulary import ErrorReason


def release_identity(
    session: Session, *, agent: Agent, quiet_seconds: float, actor: str, now: datetime | None = None
) -> Agent:
    """Free the record's name: clear its NATS identity so the next enrollment re-binds it."""
    now = now or utcnow()
    if agent.revoked_at is not None:
        raise ConflictError(
            ErrorReason.AGENT_REVOKED.value,
            f"agent {agent.id} is revoked: a revoked identity is never released",
            agent_id=agent.id,
        )
    quiet_for = (now - seen_at(agent)).total_seconds()
    if agent.nats_public_key is not None and quiet_for <= quiet_seconds:
        raise ConflictError(
            ErrorReason.AGENT_RECENTLY_SEEN.value,
            f"agent {agent.id} was seen {quiet_for:.0f} s ago, within the {quiet_seconds:g} s "
            "quiet window: a live agent's name is never freed underneath it",
            agent_id=agent.id,
        )
    if agent.nats_public_key is not None:
        revoke_key(
            session, agent_id=agent.id, public_key=agent.nats_public_key, reason="released", now=now
        )
        agent.nats_public_key = None
        agent.released_at = now
        agent.shared_identity_since = None
        agent.version_flapping_since = None
        session.add(agent)
        add_event(session, agent.id, "released", f"identity released by {actor}", actor=actor)
    return agent


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
        raise ConflictError("agent_revoked", f"agent {agent.id} is revoked", agent_id=agent.id)
    if agent.nats_public_key is None:
        raise ConflictError(
            "agent_released",
            f"agent {agent.id} holds no identity (released): nothing to rotate",
            agent_id=agent.id,
        )
    if agent.last_seen_at is None or (now - agent.last_seen_at).total_seconds() > stale_seconds:
        raise ConflictError(
            "agent_offline",
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
        raise UnauthorizedError("unknown_rotation", "no rotation in progress with this nonce")
    if rotation.expires_at <= now:
        raise UnauthorizedError("rotation_expired", "the rotation request has expired")
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFoundError("agent_not_found", f"agent {agent_id} not found")
    if agent.revoked_at is not None or agent.nats_public_key is None:
        raise ConflictError("agent_not_rotatable", f"agent {agent_id} holds no live identity")
    message = rotation_message(
        agent_id=agent_id, nonce=proof.nonce, new_public_key=proof.new_public_key
    )
    try:
        verify(agent.nats_public_key, message, proof.old_signature)
    except SignatureError as exc:
        raise UnauthorizedError(
            "bad_signature", f"the current key did not sign the rotation: {exc.why}"
        ) from exc
    try:
        verify(proof.new_public_key, message, proof.new_signature)
    except SignatureError as exc:
        raise BadRequestError(
            "bad_signature", f"the new key did not sign the rotation: {exc.why}"
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
