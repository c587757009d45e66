"""Sending a dispatched target's command again while no result has come.

Commands go out on core NATS, fire-and-forget: a nats-server that dies between the publish and
the delivery loses them, and their targets would time out. So the command of every target still
``dispatched`` (its rollout not finished, its agent neither revoked nor released) is sent again,
with the SAME command id and args, once its last send is ``PROXIMA_COMMAND_RESEND_SECONDS`` old,
and at once after a NATS reconnect for every send before it. Past the wave deadline too: the
target is awaited until the timeout sweep calls it ``timed_out``, which waits out an outage
(``PROXIMA_RESULT_GRACE_SECONDS``), exactly when commands get lost. The agent keeps a ledger by
command id (``agent.commands``): a command seen again is ignored while it runs and answered with
its stored result once done, never run twice.

Leased (``command-resends``) so one replica at a time sends; a lease that changes hands only
repeats a send, which the agent dedupes. Each replica remembers its own last sends (a new holder
starts from ``dispatched_at``: at worst one early repeat)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prometheus_client import Counter
from sqlalchemy import select
from sqlmodel import Session, col

from console.core.clock import utcnow
from console.models import Agent, Rollout, RolloutTarget
from console.services.leases import acquire
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.messages import CommandKind
from contracts.rollouts import ArtifactRef
from contracts.vocabulary import RolloutState, TargetStatus

__all__ = ["RESENT", "Resend", "Resender", "due_resends"]

log = logging.getLogger(__name__)

RESENT = Counter(
    "proxima_commands_resent_total",
    "Commands of dispatched targets sent again with the same id because no result had come",
)
LEASE = "command-resends"
_UNFINISHED = (RolloutState.RUNNING.value, RolloutState.STALLED.value, RolloutState.PAUSED.value)


@dataclass(frozen=True, slots=True)
class Resend:
    """What to send again: per rollout, its command args and (agent id, command id) pairs;
    ``open_ids`` are every command still awaited (due or not)."""

    by_rollout: dict[str, tuple[dict[str, object], list[tuple[str, str]]]]
    open_ids: frozenset[str]

    @property
    def count(self) -> int:
        return sum(len(sends) for _args, sends in self.by_rollout.values())


def _aware(at: datetime, like: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=like.tzinfo)


def due_resends(
    session: Session,
    *,
    now: datetime,
    older_than: float,
    last_sent: Mapping[str, datetime] | None = None,
    sent_before: datetime | None = None,
) -> Resend:
    """The dispatched targets whose last send (``last_sent`` by command id, else
    ``dispatched_at``) is ``older_than`` seconds old, or earlier than ``sent_before``."""
    last_sent = last_sent or {}
    rows = session.execute(
        select(
            col(RolloutTarget.rollout_id),
            col(RolloutTarget.agent_id),
            col(RolloutTarget.command_id),
            col(RolloutTarget.dispatched_at),
            col(Rollout.artifact),
        )
        .join(Rollout, col(Rollout.id) == col(RolloutTarget.rollout_id))
        .join(Agent, col(Agent.id) == col(RolloutTarget.agent_id))
        .where(
            col(RolloutTarget.status) == TargetStatus.DISPATCHED.value,
            col(Rollout.state).in_(_UNFINISHED),
            col(Agent.revoked_at).is_(None),
            col(Agent.released_at).is_(None),
        )
    ).all()
    cutoff = now - timedelta(seconds=older_than)
    by_rollout: dict[str, tuple[dict[str, object], list[tuple[str, str]]]] = {}
    open_ids: set[str] = set()
    for rollout_id, agent_id, command_id, dispatched_at, artifact in rows:
        if command_id is None or dispatched_at is None:
            continue
        open_ids.add(command_id)
        last = last_sent.get(command_id, _aware(dispatched_at, now))
        if last > cutoff and (sent_before is None or last >= sent_before):
            continue
        if rollout_id not in by_rollout:
            args: dict[str, object] = {
                "rollout_id": rollout_id,
                **ArtifactRef.model_validate(artifact).model_dump(),
            }  # exactly what ``dispatch`` sent
            by_rollout[rollout_id] = (args, [])
        by_rollout[rollout_id][1].append((agent_id, command_id))
    return Resend(by_rollout, frozenset(open_ids))


@dataclass
class Resender:
    """One replica's resends: ``resend`` on every sweep and after every NATS reconnect."""

    rt: ServiceRuntime
    holder: str
    _last_sent: dict[str, datetime] = field(default_factory=dict)

    async def resend(self, *, sent_before: datetime | None = None) -> int | None:
        """Send again what is due (see the module); the number sent, None without the lease."""
        every = self.rt.settings.command_resend_seconds
        now = utcnow()

        def work(uow: UnitOfWork) -> Resend | None:
            if not acquire(uow.session, LEASE, self.holder, ttl=max(5.0, 3 * every), now=now):
                return None
            return due_resends(
                uow.session,
                now=now,
                older_than=every,
                last_sent=self._last_sent,
                sent_before=sent_before,
            )

        found = await self.rt.units.run(work, write=True)
        if found is None:
            return None
        self._last_sent = {k: v for k, v in self._last_sent.items() if k in found.open_ids}
        for args, sends in found.by_rollout.values():
            await self.rt.send_commands(sends, CommandKind.SELF_UPDATE, args)
            for _agent_id, command_id in sends:
                self._last_sent[command_id] = now
            RESENT.inc(len(sends))
        if found.count:
            log.info(
                "sent %d command(s) again (no result yet%s)",
                found.count,
                ", NATS reconnected" if sent_before is not None else "",
            )
        return found.count
