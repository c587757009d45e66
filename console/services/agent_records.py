"""Writes and reads every agent use case shares: loading a record for a principal, identity
evidence, history events, retiring a NATS key, whether an agent is online and whether it shows
the ``rebound`` flag."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Insert, func, insert
from sqlmodel import Session, col, select

import rollout_policy
from console.auth import Principal
from console.core.secrets import evidence_hash
from console.errors import NotFoundError
from console.models import (
    Agent,
    AgentEvent,
    AgentEvidence,
    NatsAccount,
    NatsRevocation,
    table_of,
)
from console.services.nats_keys import OPERATOR
from contracts.enrollment import IdentitySignals
from contracts.vocabulary import AgentStatus, ErrorReason, Scope


def load_agent(session: Session, agent_id: str, principal: Principal, scope: Scope) -> Agent:
    """The record, once the principal holds ``scope`` on its client and environment."""
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFoundError(ErrorReason.AGENT_NOT_FOUND, f"agent {agent_id} not found")
    principal.require_on(scope, client_id=agent.client_id, environment_id=agent.environment_id)
    return agent


def seconds_since_seen(agent: Agent, now: datetime) -> float | None:
    """Age of the record's last heartbeat (or enrollment); None when it never showed a sign."""
    return (now - agent.last_seen_at).total_seconds() if agent.last_seen_at else None


def is_online(agent: Agent, *, stale_seconds: float, now: datetime) -> bool:
    """``rollout_policy.identities.is_online`` for a record (the one definition of "online")."""
    return rollout_policy.is_online(
        seconds_since_seen(agent, now),
        stale_after_seconds=stale_seconds,
        revoked=agent.revoked_at is not None,
        holds_identity=agent.nats_public_key is not None,
    )


def status(agent: Agent, *, stale_seconds: float, now: datetime) -> AgentStatus:
    """``rollout_policy.identities.agent_status`` for a record."""
    return rollout_policy.agent_status(
        seconds_since_seen(agent, now),
        stale_after_seconds=stale_seconds,
        revoked=agent.revoked_at is not None,
        holds_identity=agent.nats_public_key is not None,
    )


def record_evidence(
    session: Session,
    *,
    agent_id: str,
    signals: IdentitySignals,
    source: str,
    now: datetime,
    new_record: bool = False,
) -> int:
    """Attach the presented identity signals to a record; returns how many were new."""
    existing = (
        {}
        if new_record
        else {
            (e.kind, e.value_hash): e
            for e in session.exec(select(AgentEvidence).where(AgentEvidence.agent_id == agent_id))
        }
    )
    new: list[dict[str, Any]] = []
    for kind, value in signals.present().items():
        h = evidence_hash(kind, value)
        if (kind, h) in existing:
            existing[(kind, h)].last_seen_at = now
            session.add(existing[(kind, h)])
        else:
            new.append(
                {
                    "agent_id": agent_id,
                    "kind": kind,
                    "value_hash": h,
                    "source": source,
                    "first_seen_at": now,
                    "last_seen_at": now,
                }
            )
    if new:
        append_rows(session, _INSERT_EVIDENCE, new)
    return len(new)


def revoke_key(
    session: Session, *, agent_id: str, public_key: str, reason: str, now: datetime
) -> None:
    """Take a key away: its NATS JWTs are refused from now on (after the next push)."""
    if session.get(NatsRevocation, public_key) is None:
        session.add(
            NatsRevocation(
                public_key=public_key,
                agent_id=agent_id,
                revoked_at=revocation_stamp(session, now),
                reason=reason,
            )
        )


_STAMP = "proxima.revocation_stamp"


def revocation_stamp(session: Session, now: datetime) -> int:
    """The ``revoked_at`` of a new revocation: unix seconds, and strictly above every revocation
    committed before this transaction (one stamp per transaction).

    It is the claims' version: an account JWT's ``iat`` is its newest revocation's stamp, and a
    server's ``full`` resolver keeps the JWT with the larger ``iat`` whatever order pushes land
    in. So a replica that rendered its JWT before this revocation committed (a stale list, even
    in the same second) can never displace the JWT holding it: the last *state* wins, not the
    last pusher. Concurrent revocations (two replicas) are ordered by a row lock on the
    operator's key (``FOR UPDATE`` on PostgreSQL; SQLite serialises writers anyway)."""
    transaction = session.get_transaction()
    held = session.info.get(_STAMP)
    if held is not None and held[0] is transaction:
        return int(held[1])
    session.exec(
        select(NatsAccount.name).where(NatsAccount.name == OPERATOR).with_for_update()
    ).first()
    newest = session.exec(select(func.max(col(NatsRevocation.revoked_at)))).one()
    stamp = max(int(now.timestamp()), (newest or 0) + 1)
    session.info[_STAMP] = (transaction, stamp)
    return stamp


def seen_at(agent: Agent) -> datetime:
    return agent.last_seen_at or agent.enrolled_at


REBOUND_FLAG_SECONDS: Final = 7 * 24 * 3600.0
"""How long a record shows the ``rebound`` flag after a quiet re-bind (a week: long enough for
an operator to notice, short enough that an expected hostDataDir move stops showing)."""


def is_recently_rebound(agent: Agent, now: datetime) -> bool:
    return agent.rebound_at is not None and (now - agent.rebound_at) <= timedelta(
        seconds=REBOUND_FLAG_SECONDS
    )


# History and new evidence are only ever appended: they are written with Core INSERTs (built once
# here), not ORM objects — building a SQLModel table object and flushing it costs several times
# the INSERT itself, and enrollment writes both on every call (docs/performance.md).
_INSERT_EVENT: Insert = insert(table_of(AgentEvent))
_INSERT_EVIDENCE: Insert = insert(table_of(AgentEvidence))


def append_rows(session: Session, statement: Insert, rows: list[dict[str, Any]]) -> None:
    """Execute a Core INSERT in the session's transaction, after the records this session has
    made but not yet flushed (the rows may point at them)."""
    if session.new:
        session.flush()
    session.execute(statement, rows)


def add_event(session: Session, agent_id: str, kind: str, message: str, **detail: object) -> None:
    append_rows(
        session,
        _INSERT_EVENT,
        [{"agent_id": agent_id, "kind": kind, "message": message, "detail": dict(detail)}],
    )
