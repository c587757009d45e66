"""The NATS adapter: heartbeats, metrics, results, inventory and refused connections from NATS
into the services, in batches.

Messages are queued as they arrive and written every ``heartbeat_flush_seconds`` (or sooner when
``heartbeat_batch_max`` pile up), one UPDATE per agent per batch: thousands of heartbeats a second
cost a handful of transactions. Command results are requests: each is answered with a
``ResultAck`` only after its batch has committed (at-least-once delivery; the agent retries
until answered). A database outage keeps heartbeats (the latest per agent) for the next batch
and answers results ``unavailable``; it is logged once when it starts and once when it ends.
A row the database refuses on its own never fails the rest of its batch
(``console.ingest.rejections``), and writes that keep failing for everyone fail ``/readyz``
(:attr:`Ingester.writes`).

The subject names the agent (the server lets an agent publish
only under its own prefix), so the payload's own ``agent_id`` is never trusted. What is written,
and the shared-identity rule, live in ``console.services.heartbeats``.

Inventory is the one heavy message. Chunks wait in :class:`PendingChunks` within per-agent and
total limits (count, bytes, age: the ``inventory_*`` settings), only from agents the services
call collectors (``console.services.clusters.inventory_refusal``), and a complete sync is
inflated with an output cap in a worker thread, so neither a flood of chunks nor a gzip bomb
holds memory or the event loop (``/healthz`` keeps answering).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from console.core.clock import utcnow
from console.core.outages import WriteStreak
from console.errors import ServiceUnavailableError
from console.ingest.chunks import (
    INVENTORY_REFUSED,
    ChunkLimits,
    ChunkRefusedError,
    PendingChunks,
)
from console.ingest.rejections import Isolated, RowFailures, isolate, reject
from console.nats.jwt import decode_claims
from console.services.clusters import inventory_refusal, record_inventories
from console.services.heartbeats import (
    IdentityChange,
    InstanceTracker,
    record_heartbeats,
    record_refused,
)
from console.services.rollouts.results import record_results
from console.services.unit_of_work import UnitsOfWork
from contracts import subjects
from contracts.inventory import (
    InventoryAssemblyError,
    InventorySnapshot,
    assemble,
    split_chunk,
)
from contracts.messages import (
    CommandResult,
    Heartbeat,
    HostMetrics,
    ResultAck,
    ResultAckOutcome,
)
from contracts.vocabulary import ErrorReason
from contracts.vocabulary.messages import MessageKind, RejectionReason

__all__ = ["ChunkLimits", "IdentityChange", "Ingester", "InstanceTracker"]

log = logging.getLogger(__name__)

HEARTBEATS = Counter("proxima_heartbeats_ingested_total", "Heartbeats written to the database")
HEARTBEAT_LAG = Histogram(
    "proxima_heartbeat_ingest_lag_seconds",
    "From an agent sending a heartbeat to the Console committing it (up to 64 a batch)",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10),
)
INVENTORIES = Counter("proxima_inventories_recorded_total", "Cluster inventory snapshots stored")
RESULTS = Counter("proxima_command_results_total", "Command results recorded")
RESULTS_DEFERRED = Counter(
    "proxima_command_results_deferred_total",
    "Command results answered 'unavailable' (the database was down): the agents retry them",
)
LAG_SAMPLES = 64
"""Heartbeats of a batch whose lag ``HEARTBEAT_LAG`` observes (all of a smaller batch)."""
FLUSH_SECONDS = Histogram("proxima_heartbeat_flush_seconds", "Time to write one batch")
_INVALID = RejectionReason.INVALID
_UNWRITABLE = RejectionReason.UNWRITABLE


@dataclass(slots=True)
class _Unwritten:
    """Heartbeats and metrics observed but not yet committed: the latest per agent, so a
    database outage holds one entry per agent, not one per message."""

    latest: dict[str, Heartbeat] = field(default_factory=dict)
    metrics: dict[str, HostMetrics] = field(default_factory=dict)
    changes: list[IdentityChange] = field(default_factory=list)
    sent: list[datetime] = field(default_factory=list)
    count: int = 0

    def writer(self, units: UnitsOfWork) -> Callable[[list[str]], Awaitable[None]]:
        """Writes the rows of some of these agents in one unit of work."""

        async def write(part: list[str]) -> None:
            chosen = set(part)
            latest = {a: hb for a, hb in self.latest.items() if a in chosen}
            metrics = {a: m for a, m in self.metrics.items() if a in chosen}
            changes = [c for c in self.changes if c.agent_id in chosen]
            await units.run(
                lambda uow: record_heartbeats(uow.session, latest, metrics, changes), write=True
            )

        return write

    def keeping(self, agents: set[str]) -> _Unwritten:
        """What is left to write: these agents' rows only."""
        if not agents:
            return _Unwritten()
        return _Unwritten(
            latest={a: hb for a, hb in self.latest.items() if a in agents},
            metrics={a: m for a, m in self.metrics.items() if a in agents},
            changes=[c for c in self.changes if c.agent_id in agents],
            sent=self.sent if len(agents) >= len(self.latest) else [],
            count=len(agents),
        )


class Ingester:
    def __init__(
        self,
        *,
        units: UnitsOfWork,
        flush_seconds: float,
        batch_max: int,
        chunk_limits: ChunkLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        row_attempts: int = 3,
        write_failure_seconds: float = 10.0,
    ) -> None:
        self._units = units
        self._flush_seconds = flush_seconds
        self._batch_max = batch_max
        self._clock = clock
        self._heartbeats: list[tuple[str, Heartbeat]] = []
        self._metrics: dict[str, HostMetrics] = {}
        self._results: list[tuple[str, CommandResult, Any]] = []  # (agent id, result, msg)
        self._unwritten = _Unwritten()
        self.pending = PendingChunks(chunk_limits or ChunkLimits(), clock)
        self._senders: dict[str, str | None] = {}  # agent id -> why its inventory is refused
        self._inventories: dict[str, InventorySnapshot] = {}
        self._refused: dict[str, int] = {}
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.tracker = InstanceTracker()
        self.flushed = 0
        self.failures: RowFailures[tuple[MessageKind, str]] = RowFailures(row_attempts)
        self.writes = WriteStreak(write_failure_seconds, clock)

    # --- NATS callbacks -------------------------------------------------------------------
    async def on_heartbeat(self, msg: Any) -> None:
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            hb = Heartbeat.model_validate_json(msg.data)
        except (ValueError, ValidationError):
            reject(MessageKind.HEARTBEAT, _INVALID, _subject_agent(msg.subject))
            return
        self._heartbeats.append((agent_id, hb))
        if len(self._heartbeats) >= self._batch_max:
            self._full.set()

    async def on_result(self, msg: Any) -> None:
        """A result, as a request: answered with a :class:`ResultAck` after the batch commits
        (an old agent's plain publish has no reply subject and gets no answer)."""
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            self._results.append((agent_id, CommandResult.model_validate_json(msg.data), msg))
        except (ValueError, ValidationError):
            reject(MessageKind.RESULT, _INVALID, _subject_agent(msg.subject))
            return
        self._full.set()  # results decide stalls: write them without waiting for the timer

    async def on_inventory(self, msg: Any) -> None:
        """Collect chunks; a complete sync is inflated off the event loop and queued."""
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            header, part = split_chunk(msg.data)
        except ValueError:
            reject(MessageKind.INVENTORY, _INVALID, _subject_agent(msg.subject))
            return
        if not await self._may_send_inventory(agent_id):
            return
        try:
            parts = self.pending.add(agent_id, header, part)
        except ChunkRefusedError as exc:
            INVENTORY_REFUSED.labels(exc.reason).inc()
            log.warning("inventory sync of agent %s dropped: %s", agent_id, exc)
            return
        if parts is None:
            return
        try:
            snapshot = await asyncio.to_thread(
                assemble, parts, max_bytes=self.pending.limits.max_inflated_bytes
            )
        except InventoryAssemblyError as exc:
            INVENTORY_REFUSED.labels("assembly").inc()
            log.warning("inventory from agent %s refused: %s", agent_id, exc)
            return
        self._inventories[agent_id] = snapshot
        self._full.set()

    async def _may_send_inventory(self, agent_id: str) -> bool:
        """Only collectors send inventory: asked once per agent (a type never changes)."""
        if agent_id not in self._senders:
            if len(self._senders) > 100_000:
                self._senders.clear()
            refusal = await self._units.run(lambda uow: inventory_refusal(uow.session, agent_id))
            self._senders[agent_id] = refusal
            if refusal:
                log.warning("inventory from agent %s refused: %s", agent_id, refusal)
        if self._senders[agent_id]:
            INVENTORY_REFUSED.labels("not_a_collector").inc()
            return False
        return True

    async def on_auth_error(self, msg: Any) -> None:
        """The server refused a connection: note it when the key is one we took away."""
        try:
            client = json.loads(msg.data).get("client", {})
            token = client.get("jwt")
            public_key = decode_claims(token).get("sub") if token else client.get("nkey")
        except (ValueError, AttributeError, IndexError):
            return
        if isinstance(public_key, str) and public_key:
            self._refused[public_key] = self._refused.get(public_key, 0) + 1
            self._full.set()

    async def on_metrics(self, msg: Any) -> None:
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            self._metrics[agent_id] = HostMetrics.model_validate_json(msg.data)
        except (ValueError, ValidationError):
            reject(MessageKind.METRICS, _INVALID, _subject_agent(msg.subject))

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="heartbeat-ingest")

    async def stop(self) -> None:
        if self._task:
            # One cancel ends it: ``_run`` waits with ``asyncio.timeout``, which (unlike 3.11's
            # ``wait_for``) never swallows it (tests/agent/test_async_waits.py).
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self.flush()
        except ServiceUnavailableError:
            log.warning("stopping with unwritten heartbeats: the database is unavailable")

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self._flush_seconds):
                    await self._full.wait()
            except TimeoutError:
                pass
            self._full.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except ServiceUnavailableError:
                pass  # logged once per outage by the units' ``database``; kept, retried
            except Exception:
                log.exception("ingest flush failed; its heartbeats are kept and retried")

    async def flush(self) -> None:
        """Write what arrived. Results are answered per batch (recorded, or ``unavailable``
        for the agent to retry); heartbeats, metrics and inventories that fail to write are
        kept (the latest per agent) for the next batch, a row the database refuses alone only
        within its attempts; raises ServiceUnavailableError on an outage."""
        for agent_id in self.pending.expire():
            INVENTORY_REFUSED.labels("too_old").inc()
            log.warning(
                "inventory sync of agent %s dropped: incomplete after %s s",
                agent_id,
                self.pending.limits.max_age_seconds,
            )
        self.writes.started()
        outcomes = [await self._write_results(), await self._write_inventories()]
        try:
            await self._write_refused()
            outcomes.append(await self._write_heartbeats())
        except ServiceUnavailableError as outage:
            self.writes.failed(outage.message)
            raise
        self._note(outcomes)

    def _note(self, outcomes: list[Isolated[Any, Any] | None]) -> None:
        """Tell the write streak what this flush did; raise its outage, if any."""
        tried = [done for done in outcomes if done is not None]
        outage = next((done.outage for done in tried if done.outage is not None), None)
        if not tried or any(done.written for done in tried):
            self.writes.succeeded()
        else:
            failed = [problem for done in tried for _row, problem in done.failed]
            self.writes.failed(outage.message if outage else (failed or ["unknown"])[0])
        if outage is not None:
            raise outage

    async def _write_refused(self) -> None:
        refused, self._refused = self._refused, {}
        if refused:
            try:
                await self._units.run(lambda uow: record_refused(uow.session, refused), write=True)
            except ServiceUnavailableError:
                for key, count in refused.items():
                    self._refused[key] = self._refused.get(key, 0) + count
                raise

    def _drop_after_attempts(
        self, kind: MessageKind, key: str, agent_id: str, problem: str
    ) -> bool:
        """A row that failed alone: True (counted, logged once) when its attempts are used."""
        if not self.failures.failed((kind, key)):
            return False
        reject(kind, _UNWRITABLE, agent_id, problem)
        return True

    async def _write_inventories(self) -> Isolated[str, None] | None:
        inventories, self._inventories = self._inventories, {}
        if not inventories:
            return None

        async def write(part: list[str]) -> None:
            chosen = {agent_id: inventories[agent_id] for agent_id in part}
            await self._units.run(lambda uow: record_inventories(uow.session, chosen), write=True)

        done = await isolate(sorted(inventories), write)
        INVENTORIES.inc(sum(len(part) for part, _ in done.written))
        keep = list(done.unwritten)
        for agent_id, problem in done.failed:
            if not self._drop_after_attempts(MessageKind.INVENTORY, agent_id, agent_id, problem):
                keep.append(agent_id)
        for agent_id in keep:  # a newer sync that arrived meanwhile wins
            self._inventories.setdefault(agent_id, inventories[agent_id])
        return done

    async def _write_heartbeats(self) -> Isolated[str, None] | None:
        batch, self._heartbeats = self._heartbeats, []
        metrics, self._metrics = self._metrics, {}
        pending = self._unwritten
        now_mono = self._clock()
        for agent_id, hb in batch:
            pending.latest[agent_id] = hb
            change = self.tracker.observe(
                agent_id, hb.instance_id, hb.version, hb.heartbeat_interval_seconds, now_mono
            )
            if change:
                pending.changes.append(change)
        pending.metrics = {**pending.metrics, **metrics}
        pending.count += len(batch)
        # lag samples: the batch's first (its oldest) and evenly spaced ones after it, at most
        # LAG_SAMPLES a batch (one histogram observation per heartbeat cost more than its row)
        step = max(1, len(batch) // LAG_SAMPLES)
        pending.sent.extend(hb.sent_at for _a, hb in batch[::step])
        del pending.sent[: -self._batch_max]  # a bounded list
        if not pending.latest and not pending.metrics:
            return None
        started = time.perf_counter()
        done = await isolate(
            sorted(pending.latest.keys() | pending.metrics.keys()), pending.writer(self._units)
        )
        FLUSH_SECONDS.observe(time.perf_counter() - started)
        self._unwritten = pending.keeping(self._kept_heartbeats(pending, done))
        if done.written:
            self._count_written(pending, done)
        return done

    def _kept_heartbeats(self, pending: _Unwritten, done: Isolated[str, None]) -> set[str]:
        keep = set(done.unwritten)
        for agent_id, problem in done.failed:
            kind = MessageKind.HEARTBEAT if agent_id in pending.latest else MessageKind.METRICS
            if not self._drop_after_attempts(kind, agent_id, agent_id, problem):
                keep.add(agent_id)
        for part, _ in done.written:
            for agent_id in part:
                self.failures.written((MessageKind.HEARTBEAT, agent_id))
        return keep

    def _count_written(self, pending: _Unwritten, done: Isolated[str, None]) -> None:
        committed = utcnow()
        for sent_at in pending.sent if not done.failed and done.outage is None else ():
            sent = sent_at if sent_at.tzinfo else sent_at.replace(tzinfo=committed.tzinfo)
            HEARTBEAT_LAG.observe(max(0.0, (committed - sent).total_seconds()))
        written = max(0, pending.count - len(self._unwritten.latest))
        HEARTBEATS.inc(written)
        self.flushed += written

    async def _write_results(self) -> Isolated[tuple[str, CommandResult, Any], Any] | None:
        """Commit the batch (a refused row alone: ``console.ingest.rejections``), then answer
        each request; a database outage answers ``unavailable`` (the agents keep their results
        and retry)."""
        results, self._results = self._results, []
        if not results:
            return None

        async def write(part: list[tuple[str, CommandResult, Any]]) -> Any:
            rows = [(agent_id, result) for agent_id, result, _msg in part]
            return await self._units.run(lambda uow: record_results(uow.session, rows), write=True)

        done = await isolate(results, write)
        answers: list[tuple[Any, ResultAck]] = []
        for part, recorded in done.written:
            RESULTS.inc(len(part))
            for rollout_id in recorded.halted:
                log.warning("rollout %s halted by its failure criteria", rollout_id)
            for (agent_id, _r, _m), ack in zip(part, recorded.acks, strict=True):
                if ack.outcome is ResultAckOutcome.REFUSED:
                    log.warning("result from agent %s refused: %s", agent_id, ack.message)
            answers.extend(
                (msg, ack) for (_a, _r, msg), ack in zip(part, recorded.acks, strict=True)
            )
        for (agent_id, result, msg), problem in done.failed:
            key = f"{agent_id}/{result.command_id}"  # its retries count against it
            dropped = self._drop_after_attempts(MessageKind.RESULT, key, agent_id, problem)
            answers.append((msg, _unstorable(result, dropped=dropped)))
        if done.outage is not None:
            outage = done.outage
            answers.extend(
                (msg, _unavailable(result, outage.reason, outage.message))
                for _a, result, msg in done.unwritten
            )
            RESULTS_DEFERRED.inc(len(done.unwritten))
        await self._answer(answers)
        return done

    async def _answer(self, answers: list[tuple[Any, ResultAck]]) -> None:
        for msg, ack in answers:
            if not getattr(msg, "reply", None):
                continue
            try:
                await msg.respond(ack.model_dump_json(exclude_none=True).encode())
            except Exception as e:  # NATS went away: the agent times out and retries
                log.debug("acknowledging result %s failed: %s", ack.command_id, e)


def _unavailable(result: CommandResult, reason: ErrorReason, message: str) -> ResultAck:
    return ResultAck(
        command_id=result.command_id,
        outcome=ResultAckOutcome.UNAVAILABLE,
        reason=reason,
        message=message,
    )


def _unstorable(result: CommandResult, *, dropped: bool) -> ResultAck:
    """The answer to a result the database refused alone: retry later, or, its attempts used,
    refused for good (the agent stops sending it)."""
    if not dropped:
        return _unavailable(
            result, ErrorReason.DATABASE_UNAVAILABLE, "the result could not be stored; retry later"
        )
    return ResultAck(
        command_id=result.command_id,
        outcome=ResultAckOutcome.REFUSED,
        reason=ErrorReason.INVALID_REQUEST,
        message="the Console cannot store this result",
    )


def _subject_agent(subject: str) -> str:
    """The agent a message's subject names, for a rejection's log line ("?" when it names none)."""
    try:
        return subjects.agent_id_of(subject)
    except ValueError:
        return "?"
