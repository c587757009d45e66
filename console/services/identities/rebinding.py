"""What a re-bind takes away from the machine that held the record before.

A quiet re-bind (``rollout_policy.identities.RebindHow.QUIET_WITH_EVIDENCE``) hands the record to
another key. Whatever was in flight for the old key ends here, in the same transaction:

- the old key is retired (``agent_records.revoke_key``, reason ``rebound``): NATS refuses it, so
  it can neither report a result nor receive the next command;
- rollout targets *dispatched* to the record become ``timed_out`` with a reason naming the
  re-bind (the outcome is unknown — never ``failed``, which would blame the new build), and a
  result arriving later is ignored like any repeated one (the target is final);
- credential rotations not yet completed are closed, so a nonce delivered to the old key can
  never be completed with the old key's signature;
- the record is flagged ``rebound`` (``Agent.rebound_at``) for
  ``agent_records.REBOUND_FLAG_SECONDS``.

A re-bind after release-identity keeps none of this to cancel (release already retired the key);
it still closes open rotations. It is the operator's hand-over of the record to whichever machine
enrolls next under its name: the record's identity evidence becomes that machine's
(:func:`replace_evidence`), and the ``rebound`` event and the audit line name the release and
both machines' evidence by kind (:func:`handover`), never by value.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, col, select

from console.core.audit_log import Field as AuditField
from console.models import (
    Agent,
    AgentEvent,
    AgentEvidence,
    CredentialRotation,
    NatsRevocation,
    Rollout,
    RolloutTarget,
)
from console.services.rollouts.records import counts
from console.services.rollouts.results import judge
from contracts.vocabulary import TargetStatus
from rollout_policy import missing_evidence_kinds

__all__ = ["cancel_in_flight", "handover", "rebound_refusal", "replace_evidence"]


def cancel_in_flight(session: Session, agent: Agent, now: datetime) -> dict[str, int]:
    """End what was in flight for the record's previous key; how many of each were ended."""
    dispatched = session.exec(
        select(RolloutTarget).where(
            RolloutTarget.agent_id == agent.id,
            RolloutTarget.status == TargetStatus.DISPATCHED.value,
        )
    ).all()
    touched: set[str] = set()
    for target in dispatched:
        target.status = TargetStatus.TIMED_OUT.value
        target.error = (
            f"identity re-bound to another machine at {now.isoformat()} before a result: the "
            "command went to the retired key"
        )
        target.finished_at = now
        session.add(target)
        touched.add(target.rollout_id)
    rotations = session.exec(
        select(CredentialRotation).where(
            CredentialRotation.agent_id == agent.id, col(CredentialRotation.completed_at).is_(None)
        )
    ).all()
    for rotation in rotations:
        rotation.expires_at = now  # never completable again
        session.add(rotation)
    session.flush()
    for rollout_id in sorted(touched):
        rollout = session.get(Rollout, rollout_id)
        if rollout is not None and judge(rollout, counts(session, rollout_id), now):
            session.add(rollout)
    return {"rollout_targets": len(dispatched), "rotations": len(rotations)}


def rebound_refusal(session: Session, agent_id: str, public_key: str) -> str | None:
    """When ``public_key`` was retired from ``agent_id`` by a re-bind: the words the displaced
    key holder is told (None when it was not)."""
    row = session.get(NatsRevocation, public_key)
    if row is None or row.agent_id != agent_id or row.reason != "rebound":
        return None
    at = datetime.fromtimestamp(row.revoked_at).astimezone().isoformat()
    return (
        f"identity re-bound to another machine at {at}; this agent's key was retired (agent "
        f"{agent_id}). Check who enrolled with this name; to run this machine again, remove its "
        "state file and enroll it (a new record, or release-identity first)"
    )


Evidence = frozenset[tuple[str, str]]


def kinds(evidence: Evidence) -> list[str]:
    """Evidence as the history and the audit show it: its kinds, never a value or its hash."""
    return sorted({kind for kind, _ in evidence})


def replace_evidence(session: Session, agent_id: str, presented: Evidence) -> int:
    """Drop the record's evidence the new machine does not present (what it does present is
    kept, then renewed by ``record_evidence``); how many rows went."""
    rows = session.exec(select(AgentEvidence).where(AgentEvidence.agent_id == agent_id)).all()
    gone = [row for row in rows if (row.kind, row.value_hash) not in presented]
    for row in gone:
        session.delete(row)
    return len(gone)


def handover(
    session: Session, agent: Agent, held: Evidence, presented: Evidence
) -> dict[str, AuditField]:
    """What a re-bind after release records: the release (when, by whom) and both machines'
    evidence by kind, with the kinds whose values differ."""
    released = session.exec(
        select(AgentEvent)
        .where(AgentEvent.agent_id == agent.id, AgentEvent.kind == "released")
        .order_by(col(AgentEvent.at).desc(), col(AgentEvent.id).desc())
    ).first()
    return {
        "released_at": agent.released_at.isoformat() if agent.released_at else None,
        "released_by": None if released is None else str(released.detail.get("actor") or ""),
        "previous_evidence": kinds(held),
        "presented_evidence": kinds(presented),
        "evidence_differs": sorted(missing_evidence_kinds(held, presented)),
    }
