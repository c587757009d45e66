"""Dispatching a wave: idempotent, at most once per (rollout, agent).

Invariant — marked dispatched, committed, then published: ``dispatch`` marks the wave's
targets dispatched in its unit of work, and the self_update commands are an after-commit effect
of that unit. A command's id is derived from (rollout, agent) and a target is dispatched once; a
message lost on the way is sent again with the same id (``rollouts.resend``), which the agent's
ledger runs once — never a second execution. Nothing is dispatched unless the rollout is
``running``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, update
from sqlmodel import Session, col, select

from console.auth import Principal
from console.core.clock import utcnow
from console.errors import BadRequestError
from console.models import Rollout, RolloutTarget
from console.services.rollouts.records import (
    command_id_for,
    load_for,
)
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.messages import CommandKind
from contracts.rollouts import ArtifactRef, DispatchResult
from contracts.vocabulary import ErrorReason, Scope, TargetStatus
from rollout_policy import (
    RolloutState,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Dispatch:
    rollout_id: str
    wave: int
    to_send: list[tuple[str, str]]  # (agent_id, command_id)
    already_sent: int
    refused: str | None
    artifact: ArtifactRef | None


def dispatch_wave(
    session: Session, *, rollout: Rollout, wave: int, now: datetime | None = None
) -> Dispatch:
    """Mark the wave's undispatched targets as dispatched; return what to send now."""
    now = now or utcnow()
    if wave < 0 or wave >= len(rollout.waves):
        raise BadRequestError(ErrorReason.NO_SUCH_WAVE, f"rollout {rollout.id} has no wave {wave}")
    if rollout.state != RolloutState.RUNNING.value:
        return Dispatch(rollout.id, wave, [], 0, f"rollout is {rollout.state}", None)
    earlier_open = session.exec(
        select(RolloutTarget.id).where(
            RolloutTarget.rollout_id == rollout.id,
            col(RolloutTarget.wave) < wave,
            col(RolloutTarget.status).in_([TargetStatus.PENDING, TargetStatus.DISPATCHED]),
        )
    ).first()
    if earlier_open is not None:
        return Dispatch(rollout.id, wave, [], 0, "an earlier wave is not finished", None)
    rows = session.exec(
        select(RolloutTarget.id, RolloutTarget.agent_id, RolloutTarget.status).where(
            RolloutTarget.rollout_id == rollout.id, RolloutTarget.wave == wave
        )
    ).all()
    deadline = now + timedelta(seconds=rollout.wave_timeout_seconds)
    to_send: list[tuple[str, str]] = []
    marks: list[dict[str, object]] = []
    for target_id, agent_id, status in rows:
        if status != TargetStatus.PENDING.value:
            continue
        command_id = command_id_for(rollout.id, agent_id)
        marks.append({"target_id": target_id, "cid": command_id})
        to_send.append((agent_id, command_id))
    already = len(rows) - len(marks)
    if marks:
        # One statement for the wave (executemany), each row still conditional on ``pending``.
        table = RolloutTarget.__table__  # type: ignore[attr-defined]  # Core: no ORM objects
        session.execute(
            update(table)
            .where(
                table.c.id == bindparam("target_id"),
                table.c.status == TargetStatus.PENDING.value,
            )
            .values(
                status=TargetStatus.DISPATCHED.value,
                command_id=bindparam("cid"),
                dispatched_at=now,
                deadline_at=deadline,
            ),
            marks,
        )
    return Dispatch(
        rollout.id, wave, to_send, already, None, ArtifactRef.model_validate(rollout.artifact)
    )


async def _publish(
    rt: ServiceRuntime, sends: list[tuple[str, str]], args: dict[str, object]
) -> None:
    """The wave's commands; a publish that fails (NATS went away) is logged, not raised: the
    targets are committed as dispatched and ``rollouts.resend`` sends them again."""
    try:
        await rt.send_commands(sends, CommandKind.SELF_UPDATE, args)
    except Exception as exc:
        log.warning(
            "publishing %d command(s) of rollout %s failed (%s: %s); they are sent again once "
            "NATS is back",
            len(sends),
            args.get("rollout_id"),
            exc.__class__.__name__,
            exc,
        )


async def dispatch(
    rt: ServiceRuntime, principal: Principal, rollout_id: str, wave: int
) -> DispatchResult:
    """Send self_update to the wave's agents not yet sent to (see the module's invariant)."""

    def work(uow: UnitOfWork) -> Dispatch:
        rollout = load_for(uow.session, rollout_id, principal, Scope.ROLLOUTS_WRITE)
        result = dispatch_wave(uow.session, rollout=rollout, wave=wave)
        if result.to_send and result.artifact is not None:
            args: dict[str, object] = {"rollout_id": rollout_id, **result.artifact.model_dump()}
            sends = list(result.to_send)
            uow.after_commit(lambda: _publish(rt, sends, args))
        return result

    result = await rt.units.run(work, write=True)
    return DispatchResult(
        rollout_id=rollout_id,
        wave=wave,
        sent=len(result.to_send),
        already_sent=result.already_sent,
        refused=result.refused,
    )
