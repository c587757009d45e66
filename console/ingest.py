"""The NATS adapter: heartbeats, metrics, results, inventory and refused connections from NATS
into the services, in batches.

Messages are queued as they arrive and written every ``heartbeat_flush_seconds`` (or sooner when
``heartbeat_batch_max`` pile up), one UPDATE per agent per batch: thousands of heartbeats a second
cost a handful of transactions. Command results are requests: each is answered with a
``ResultAck`` only after its batch has committed (at-least-once delivery; the agent retries
until answered). A database outage keeps heartbeats (the latest per agent) for the next batch
and answers results ``unavailable``; it is logged once when it starts and once when it ends.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from pydantic import ValidationError

from console.core.clock import utcnow
from console.errors import ServiceUnavailableError
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
    ChunkHeader,
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

__all__ = [
    "ChunkLimits",
    "ChunkRefusedError",
    "IdentityChange",
    "Ingester",
    "InstanceTracker",
    "PendingChunks",
]

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
REJECTED = Counter("proxima_messages_rejected_total", "Agent messages that did not parse", ["kind"])
INVENTORY_REFUSED = Counter(
    "proxima_inventory_refused_total", "Inventory chunks or syncs refused", ["reason"]
)
PENDING_BYTES = Gauge("proxima_inventory_pending_bytes", "Bytes of inventory chunks waiting")
PENDING_CHUNKS = Gauge("proxima_inventory_pending_chunks", "Inventory chunks waiting")


@dataclass(frozen=True, slots=True)
class ChunkLimits:
    """The ``inventory_*`` settings: what one agent (and all) may have waiting."""

    max_chunks: int = 1024
    max_bytes: int = 64 * 1024 * 1024
    max_bytes_total: int = 256 * 1024 * 1024
    max_age_seconds: float = 120.0
    max_inflated_bytes: int = 64 * 1024 * 1024


class ChunkRefusedError(Exception):
    """A chunk that would break a limit: its whole sync is dropped. ``reason`` is a metric label."""

    def __init__(self, agent_id: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id
        self.reason = reason


@dataclass(slots=True)
class _Unwritten:
    """Heartbeats and metrics observed but not yet committed: the latest per agent, so a
    database outage holds one entry per agent, not one per message."""

    latest: dict[str, Heartbeat] = field(default_factory=dict)
    metrics: dict[str, HostMetrics] = field(default_factory=dict)
    changes: list[IdentityChange] = field(default_factory=list)
    sent: list[datetime] = field(default_factory=list)
    count: int = 0


@dataclass(slots=True)
class _Sync:
    header: ChunkHeader
    started: float
    parts: dict[int, bytes] = field(default_factory=dict)
    size: int = 0


class PendingChunks:
    """The chunks of each agent's sync in flight (one per agent: a new ``sync_id`` replaces the
    older one), held within :class:`ChunkLimits`."""

    def __init__(self, limits: ChunkLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._syncs: dict[str, _Sync] = {}
        self.total_bytes = 0

    def add(
        self, agent_id: str, header: ChunkHeader, part: bytes
    ) -> list[tuple[ChunkHeader, bytes]] | None:
        """The sync's chunks once all have arrived, else None. Raises ChunkRefusedError."""
        now = self._clock()
        self.expire(now)
        sync = self._syncs.get(agent_id)
        if sync is None or sync.header.sync_id != header.sync_id:
            self._drop(agent_id)
            if header.total > self.limits.max_chunks:
                raise ChunkRefusedError(
                    agent_id,
                    "too_many_chunks",
                    f"a sync of {header.total} chunks (limit {self.limits.max_chunks})",
                )
            sync = self._syncs[agent_id] = _Sync(header=header, started=now)
        elif (header.total, header.sha256) != (sync.header.total, sync.header.sha256):
            self._drop(agent_id)
            raise ChunkRefusedError(agent_id, "inconsistent", "chunks of one sync disagree")
        old = sync.parts.pop(header.seq, b"")
        sync.parts[header.seq] = part
        sync.size += len(part) - len(old)
        self.total_bytes += len(part) - len(old)
        if sync.size > self.limits.max_bytes:
            self._drop(agent_id)
            raise ChunkRefusedError(
                agent_id,
                "too_many_bytes",
                f"more than {self.limits.max_bytes} bytes of chunks waiting",
            )
        self._shed(keep=agent_id)
        self._report()
        if len(sync.parts) < sync.header.total:
            return None
        self._drop(agent_id)
        return [(sync.header.model_copy(update={"seq": seq}), p) for seq, p in sync.parts.items()]

    def expire(self, now: float | None = None) -> list[str]:
        """Drop syncs older than the age limit; the agents whose sync was dropped."""
        now = self._clock() if now is None else now
        old = [a for a, s in self._syncs.items() if now - s.started > self.limits.max_age_seconds]
        for agent_id in old:
            self._drop(agent_id)
        return old

    def _shed(self, *, keep: str) -> None:
        # Over the total: the oldest syncs of other agents go first, then this one.
        for agent_id in sorted(self._syncs, key=lambda a: (a == keep, self._syncs[a].started)):
            if self.total_bytes <= self.limits.max_bytes_total:
                return
            self._drop(agent_id)
            INVENTORY_REFUSED.labels("total_bytes").inc()
            log.warning(
                "inventory sync of agent %s dropped: total pending bytes over %s",
                agent_id,
                self.limits.max_bytes_total,
            )

    def _drop(self, agent_id: str) -> None:
        sync = self._syncs.pop(agent_id, None)
        if sync is not None:
            self.total_bytes -= sync.size
        self._report()

    def _report(self) -> None:
        PENDING_BYTES.set(self.total_bytes)
        PENDING_CHUNKS.set(self.pending_chunks())

    def pending_chunks(self, agent_id: str | None = None) -> int:
        if agent_id is not None:
            sync = self._syncs.get(agent_id)
            return len(sync.parts) if sync else 0
        return sum(len(s.parts) for s in self._syncs.values())

    def pending_bytes(self, agent_id: str) -> int:
        sync = self._syncs.get(agent_id)
        return sync.size if sync else 0


class Ingester:
    def __init__(
        self,
        *,
        units: UnitsOfWork,
        flush_seconds: float,
        batch_max: int,
        chunk_limits: ChunkLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
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

    # --- NATS callbacks -------------------------------------------------------------------
    async def on_heartbeat(self, msg: Any) -> None:
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            hb = Heartbeat.model_validate_json(msg.data)
        except (ValueError, ValidationError):
            REJECTED.labels("heartbeat").inc()
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
            REJECTED.labels("result").inc()
            return
        self._full.set()  # results decide stalls: write them without waiting for the timer

    async def on_inventory(self, msg: Any) -> None:
        """Collect chunks; a complete sync is inflated off the event loop and queued."""
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            header, part = split_chunk(msg.data)
        except ValueError:
            REJECTED.labels("inventory").inc()
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
            REJECTED.labels("metrics").inc()

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
        for the agent to retry); heartbeats and metrics that fail to write are kept (the latest
        per agent) and written with the next batch; raises ServiceUnavailableError then."""
        for agent_id in self.pending.expire():
            INVENTORY_REFUSED.labels("too_old").inc()
            log.warning(
                "inventory sync of agent %s dropped: incomplete after %s s",
                agent_id,
                self.pending.limits.max_age_seconds,
            )
        results, self._results = self._results, []
        if results:
            await self._write_results(results)
        inventories, self._inventories = self._inventories, {}
        if inventories:
            await self._units.run(
                lambda uow: record_inventories(uow.session, inventories), write=True
            )
            INVENTORIES.inc(len(inventories))
        refused, self._refused = self._refused, {}
        if refused:
            try:
                await self._units.run(lambda uow: record_refused(uow.session, refused), write=True)
            except ServiceUnavailableError:
                for key, count in refused.items():
                    self._refused[key] = self._refused.get(key, 0) + count
                raise
        await self._write_heartbeats()

    async def _write_heartbeats(self) -> None:
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
            return
        latest, merged, changes = pending.latest, pending.metrics, pending.changes
        started = time.perf_counter()
        await self._units.run(
            lambda uow: record_heartbeats(uow.session, latest, merged, changes), write=True
        )
        FLUSH_SECONDS.observe(time.perf_counter() - started)
        self._unwritten = _Unwritten()
        committed = utcnow()
        for sent_at in pending.sent:
            sent = sent_at if sent_at.tzinfo else sent_at.replace(tzinfo=committed.tzinfo)
            HEARTBEAT_LAG.observe(max(0.0, (committed - sent).total_seconds()))
        HEARTBEATS.inc(pending.count)
        self.flushed += pending.count

    async def _write_results(self, results: list[tuple[str, CommandResult, Any]]) -> None:
        """Commit the batch, then answer each request; a database outage answers
        ``unavailable`` (the agents keep their results and retry)."""
        batch = [(agent_id, result) for agent_id, result, _msg in results]
        try:
            recorded = await self._units.run(
                lambda uow: record_results(uow.session, batch), write=True
            )
        except ServiceUnavailableError as e:
            acks = [
                ResultAck(
                    command_id=r.command_id,
                    outcome=ResultAckOutcome.UNAVAILABLE,
                    reason=e.reason,
                    message=e.message,
                )
                for _a, r, _m in results
            ]
            await self._answer(results, acks)
            RESULTS_DEFERRED.inc(len(results))
            return
        except Exception:
            # A bug, not an outage: no answer, so each agent retries after its timeout.
            log.exception("recording %d command results failed", len(results))
            return
        RESULTS.inc(len(results))
        for rollout_id in recorded.halted:
            log.warning("rollout %s halted by its failure criteria", rollout_id)
        for (agent_id, _r, _m), ack in zip(results, recorded.acks, strict=True):
            if ack.outcome is ResultAckOutcome.REFUSED:
                log.warning("result from agent %s refused: %s", agent_id, ack.message)
        await self._answer(results, recorded.acks)

    async def _answer(
        self, results: list[tuple[str, CommandResult, Any]], acks: list[ResultAck]
    ) -> None:
        for (_agent_id, _result, msg), ack in zip(results, acks, strict=True):
            if not getattr(msg, "reply", None):
                continue
            try:
                await msg.respond(ack.model_dump_json(exclude_none=True).encode())
            except Exception as e:  # NATS went away: the agent times out and retries
                log.debug("acknowledging result %s failed: %s", ack.command_id, e)
