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
it still closes open rotations.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, col, select

from console.models import Agent, CredentialRotation, NatsRevocation, Rollout, RolloutTarget
from console.services.rollouts.records import counts
from console.services.rollouts.results import judge
from contracts.vocabulary import TargetStatus

__all__ = ["cancel_in_flight", "rebound_refusal"]


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
