"""The Console's background work, correct with any number of replicas on one database.

Each job is leased (``leases``) so one replica at a time does it, and is idempotent besides, so
a lease that changed hands mid-job (a holder paused past its ``ttl``) doubles nothing:

- ``rollout-timeouts`` (every ``PROXIMA_ROLLOUT_SWEEP_SECONDS``): dispatched targets past their
  deadline become ``timed_out`` — a conditional update, so a result recorded meanwhile wins;
- ``rollout-drivers`` (every ``PROXIMA_DRIVER_CHECK_SECONDS``): each unfinished rollout's flow
  run asked of Prefect (``rollouts.drivers``; marking is conditional, logged once);
- ``command-resends`` (checked every quarter of ``PROXIMA_COMMAND_RESEND_SECONDS``): the
  command of a dispatched target with no result is sent again, same command id
  (``rollouts.resend``; the agent dedupes), and at once after a NATS reconnect (``resend_now``);
- rate-limit counters whose windows are over are deleted (no lease: a repeated delete is a
  no-op);
- ``sqlite-statistics`` (hourly, SQLite only): ``ANALYZE``, so the planner pages the fleet list
  by its ordering index instead of sorting (PostgreSQL's autovacuum does this itself).

Audit runs need no lease: the flow posts them, and a repeated post of one flow run answers
the run already stored (``audit.record_run``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import text

from console.core.clock import utcnow
from console.errors import ServiceUnavailableError
from console.services.leases import acquire
from console.services.rate_limits import delete_spent
from console.services.rollouts.drivers import check_drivers
from console.services.rollouts.resend import Resender
from console.services.rollouts.results import expire_overdue
from console.services.unit_of_work import ServiceRuntime, UnitOfWork

__all__ = ["Maintenance", "replica_id"]

log = logging.getLogger(__name__)

STATISTICS_SECONDS = 3600.0
_ALWAYS = datetime.min.replace(tzinfo=UTC)


def replica_id() -> str:
    """This process, as a lease holder: host, pid and a random part (pids repeat)."""
    return f"{socket.gethostname()[:32]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass
class Maintenance:
    """One replica's share of the background work: call ``tick`` on every sweep."""

    rt: ServiceRuntime
    listening_since: Callable[[], datetime | None] = field(default=lambda: _ALWAYS)
    """Since when this replica hears every result (None: not now): timeouts wait on it
    (``rollout_policy.deliveries``). The runtime passes its own; the default is "always"."""
    holder: str = field(default_factory=replica_id)
    _last: dict[str, float] = field(default_factory=dict)
    _resender: Resender | None = None

    @property
    def resender(self) -> Resender:
        if self._resender is None:
            self._resender = Resender(self.rt, self.holder)
        return self._resender

    def _due(self, job: str, every: float, now: float) -> bool:
        if now - self._last.get(job, float("-inf")) < every:
            return False
        self._last[job] = now
        return True

    async def expire_timeouts(self) -> list[str] | None:
        """Expire overdue targets when this replica holds the lease and has been listening for
        the result grace period; None when it does not."""
        s = self.rt.settings
        ttl = max(5.0, 10 * s.rollout_sweep_seconds)
        since = self.listening_since()
        if since is None:
            return None  # results may be waiting in agents' outboxes: nothing is overdue

        def work(uow: UnitOfWork) -> list[str] | None:
            if not acquire(uow.session, "rollout-timeouts", self.holder, ttl=ttl, now=utcnow()):
                return None
            return expire_overdue(
                uow.session, listening_since=since, grace_seconds=s.result_grace_seconds
            )

        return await self.rt.units.run(work, write=True)

    async def check_drivers(self) -> list[str] | None:
        ttl = 3 * self.rt.settings.driver_check_seconds

        def lease(uow: UnitOfWork) -> bool:
            return acquire(uow.session, "rollout-drivers", self.holder, ttl=ttl, now=utcnow())

        if not await self.rt.units.run(lease, write=True):
            return None
        return await check_drivers(self.rt)

    async def resend_commands(self) -> int | None:
        """Commands of dispatched targets with no result, sent again once their last send is
        ``PROXIMA_COMMAND_RESEND_SECONDS`` old; nothing while NATS or the database is down."""
        if self.listening_since() is None:
            return None
        return await self.resender.resend()

    async def resend_now(self) -> int | None:
        """After a NATS reconnect: every command sent before it, whatever its age."""
        return await self.resender.resend(sent_before=utcnow())

    async def analyze(self) -> bool:
        if not self.rt.settings.resolved_database_url().startswith("sqlite"):
            return False

        def work(uow: UnitOfWork) -> bool:
            now = utcnow()
            if not acquire(
                uow.session, "sqlite-statistics", self.holder, ttl=STATISTICS_SECONDS, now=now
            ):
                return False
            uow.session.execute(text("ANALYZE"))
            return True

        return await self.rt.units.run(work, write=True)

    async def sweep_rate_counters(self) -> int:
        """Drop rate-limit counters whose windows are over (idempotent: no lease)."""
        now = time.time()
        return await self.rt.units.run(lambda uow: delete_spent(uow, now), write=True)

    async def tick(self, monotonic_now: float) -> None:
        """The jobs that are due; one failing never stops the others."""
        s = self.rt.settings
        jobs = [
            ("timeouts", s.rollout_sweep_seconds, self.expire_timeouts),
            ("drivers", s.driver_check_seconds, self.check_drivers),
            ("resends", s.command_resend_seconds / 4, self.resend_commands),
            ("statistics", STATISTICS_SECONDS, self.analyze),
            ("rate counters", s.rollout_sweep_seconds, self.sweep_rate_counters),
        ]
        for name, every, job in jobs:
            if not self._due(name, every, monotonic_now):
                continue
            try:
                await job()
            except ServiceUnavailableError:
                pass  # the database is down: logged once per outage by ``units.database``
            except Exception:
                log.exception("background job %s failed; it runs again next time", name)
