"""The NATS adapter: heartbeats, metrics, results, inventory and refused connections from NATS
into the services, in batches.

Messages are queued as they arrive and written every ``heartbeat_flush_seconds`` (or sooner when
``heartbeat_batch_max`` pile up), one UPDATE per agent per batch: thousands of heartbeats a second
cost a handful of transactions. The subject names the agent (the server lets an agent publish
only under its own prefix), so the payload's own ``agent_id`` is never trusted. What is written,
and the shared-identity rule, live in ``console.services.heartbeats``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from console.core.clock import utcnow
from console.nats.jwt import decode_claims
from console.services.clusters import record_inventories
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
from contracts.messages import CommandResult, Heartbeat, HostMetrics

__all__ = ["IdentityChange", "Ingester", "InstanceTracker"]

log = logging.getLogger(__name__)

HEARTBEATS = Counter("proxima_heartbeats_ingested_total", "Heartbeats written to the database")
HEARTBEAT_LAG = Histogram(
    "proxima_heartbeat_ingest_lag_seconds",
    "From an agent sending a heartbeat to the Console committing it",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10),
)
INVENTORIES = Counter("proxima_inventories_recorded_total", "Cluster inventory snapshots stored")
RESULTS = Counter("proxima_command_results_total", "Command results recorded")
FLUSH_SECONDS = Histogram("proxima_heartbeat_flush_seconds", "Time to write one batch")
REJECTED = Counter("proxima_messages_rejected_total", "Agent messages that did not parse", ["kind"])


class Ingester:
    def __init__(
        self,
        *,
        units: UnitsOfWork,
        flush_seconds: float,
        batch_max: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._units = units
        self._flush_seconds = flush_seconds
        self._batch_max = batch_max
        self._clock = clock
        self._heartbeats: list[tuple[str, Heartbeat]] = []
        self._metrics: dict[str, HostMetrics] = {}
        self._results: list[tuple[str, CommandResult]] = []
        self._chunks: dict[tuple[str, str], list[tuple[ChunkHeader, bytes]]] = {}
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
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            self._results.append((agent_id, CommandResult.model_validate_json(msg.data)))
        except (ValueError, ValidationError):
            REJECTED.labels("result").inc()
            return
        self._full.set()  # results decide stalls: write them without waiting for the timer

    async def on_inventory(self, msg: Any) -> None:
        """Collect chunks; a complete, verified snapshot is queued for the next flush."""
        try:
            agent_id = subjects.agent_id_of(msg.subject)
            header, part = split_chunk(msg.data)
        except (ValueError, ValidationError):
            REJECTED.labels("inventory").inc()
            return
        key = (agent_id, header.sync_id)
        parts = self._chunks.setdefault(key, [])
        parts.append((header, part))
        # An agent only ever has one sync in flight: drop its older, incomplete ones.
        for stale in [k for k in self._chunks if k[0] == agent_id and k != key]:
            del self._chunks[stale]
        if len(parts) == header.total:
            del self._chunks[key]
            try:
                snapshot = assemble(parts)
            except (InventoryAssemblyError, ValueError, OSError):
                REJECTED.labels("inventory").inc()
                log.warning(
                    "inventory from agent %s did not assemble; waiting for the next", agent_id
                )
                return
            self._inventories[agent_id] = snapshot
            self._full.set()

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
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush()

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._full.wait(), self._flush_seconds)
            except TimeoutError:
                pass
            self._full.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("heartbeat flush failed; the batch is dropped, the next one retries")

    async def flush(self) -> None:
        batch, self._heartbeats = self._heartbeats, []
        metrics, self._metrics = self._metrics, {}
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
            await self._units.run(lambda uow: record_refused(uow.session, refused), write=True)
        if not batch and not metrics:
            return
        latest: dict[str, Heartbeat] = {}
        changes: list[IdentityChange] = []
        now_mono = self._clock()
        for agent_id, hb in batch:
            latest[agent_id] = hb
            change = self.tracker.observe(
                agent_id, hb.instance_id, hb.version, hb.heartbeat_interval_seconds, now_mono
            )
            if change:
                changes.append(change)
        started = time.perf_counter()
        await self._units.run(
            lambda uow: record_heartbeats(uow.session, latest, metrics, changes), write=True
        )
        FLUSH_SECONDS.observe(time.perf_counter() - started)
        committed = utcnow()
        for _agent_id, hb in batch:
            sent = hb.sent_at if hb.sent_at.tzinfo else hb.sent_at.replace(tzinfo=committed.tzinfo)
            HEARTBEAT_LAG.observe(max(0.0, (committed - sent).total_seconds()))
        HEARTBEATS.inc(len(batch))
        self.flushed += len(batch)

    async def _write_results(self, results: list[tuple[str, CommandResult]]) -> None:
        halted = await self._units.run(lambda uow: record_results(uow.session, results), write=True)
        RESULTS.inc(len(results))
        for rollout_id in halted:
            log.warning("rollout %s halted by its failure criteria", rollout_id)
