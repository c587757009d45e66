"""Heartbeats and metrics from NATS into the database, in batches.

Messages are queued as they arrive and written every ``heartbeat_flush_seconds`` (or sooner when
``heartbeat_batch_max`` pile up), one UPDATE per agent per batch: thousands of heartbeats a second
cost a handful of transactions. The subject names the agent (the server lets an agent publish
only under its own prefix), so the payload's own ``agent_id`` is never trusted.

Shared identity: every agent process sends a random ``instance_id``. A restart changes it once
(A A A B B B); two live processes on one identity alternate (A B A B). An instance that comes
back after another one has spoken, within two heartbeat intervals, flags the record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Histogram
from pydantic import ValidationError
from sqlalchemy import bindparam, update
from sqlalchemy.engine import Engine
from sqlmodel import Session

from console.clusters import record_inventory
from console.core.clock import utcnow
from console.models import Agent, AgentEvent, NatsRevocation
from console.nats.jwt import decode_claims
from console.rollouts import record_results
from contracts import subjects
from contracts.inventory import (
    ChunkHeader,
    InventoryAssemblyError,
    InventorySnapshot,
    assemble,
    split_chunk,
)
from contracts.messages import CommandResult, Heartbeat, HostMetrics

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


@dataclass(slots=True)
class _Seen:
    last_instance: str | None = None
    instances: dict[str, tuple[float, str]] = field(default_factory=dict)
    shared: bool = False
    flapping: bool = False


@dataclass(frozen=True, slots=True)
class IdentityChange:
    agent_id: str
    shared: bool
    flapping: bool
    instances: tuple[str, ...]
    versions: tuple[str, ...]


class InstanceTracker:
    """Detects two live processes heartbeating as one identity (see module docstring)."""

    def __init__(self, *, slack_seconds: float = 1.0) -> None:
        self._seen: dict[str, _Seen] = {}
        self._slack = slack_seconds

    def observe(
        self, agent_id: str, instance_id: str, version: str, interval: float, now: float
    ) -> IdentityChange | None:
        state = self._seen.setdefault(agent_id, _Seen())
        window = 2 * max(interval, 0.05) + self._slack
        for inst, (t, _v) in list(state.instances.items()):
            if now - t > window:
                del state.instances[inst]
        alternated = (
            state.last_instance is not None
            and instance_id != state.last_instance
            and instance_id in state.instances
        )
        state.instances[instance_id] = (now, version)
        state.last_instance = instance_id
        shared = state.shared
        if alternated:
            shared = True
        elif len(state.instances) == 1:
            shared = False
        versions = tuple(sorted({v for _t, v in state.instances.values()}))
        flapping = shared and len(versions) > 1
        if shared != state.shared or flapping != state.flapping:
            state.shared, state.flapping = shared, flapping
            return IdentityChange(
                agent_id, shared, flapping, tuple(sorted(state.instances)), versions
            )
        return None

    def forget(self, agent_id: str) -> None:
        self._seen.pop(agent_id, None)


class Ingester:
    def __init__(
        self,
        *,
        engine: Engine,
        writer: Callable[[], AbstractContextManager[object]] = nullcontext,
        flush_seconds: float,
        batch_max: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._writer = writer
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
            await asyncio.to_thread(self._write_results, results)
        inventories, self._inventories = self._inventories, {}
        if inventories:
            await asyncio.to_thread(self._write_inventories, inventories)
        refused, self._refused = self._refused, {}
        if refused:
            await asyncio.to_thread(self._write_refused, refused)
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
        await asyncio.to_thread(self._write, latest, metrics, changes)
        FLUSH_SECONDS.observe(time.perf_counter() - started)
        committed = utcnow()
        for _agent_id, hb in batch:
            sent = hb.sent_at if hb.sent_at.tzinfo else hb.sent_at.replace(tzinfo=committed.tzinfo)
            HEARTBEAT_LAG.observe(max(0.0, (committed - sent).total_seconds()))
        HEARTBEATS.inc(len(batch))
        self.flushed += len(batch)

    def _write_refused(self, refused: dict[str, int]) -> None:
        now = utcnow()
        with self._writer(), Session(self._engine) as session:
            for public_key, count in refused.items():
                row = session.get(NatsRevocation, public_key)
                if row is None:
                    continue  # a stranger's key: nothing of ours
                row.refused_attempts += count
                row.last_refused_at = now
                session.add(row)
            session.commit()

    def _write_inventories(self, inventories: dict[str, InventorySnapshot]) -> None:
        with self._writer(), Session(self._engine) as session:
            for agent_id, snapshot in inventories.items():
                record_inventory(session, agent_id=agent_id, snapshot=snapshot)
            session.commit()
        INVENTORIES.inc(len(inventories))

    def _write_results(self, results: list[tuple[str, CommandResult]]) -> None:
        with self._writer(), Session(self._engine) as session:
            halted = record_results(session, results)
            session.commit()
        RESULTS.inc(len(results))
        for rollout_id in halted:
            log.warning("rollout %s halted by its failure criteria", rollout_id)

    def _write(
        self,
        latest: dict[str, Heartbeat],
        metrics: dict[str, HostMetrics],
        changes: list[IdentityChange],
    ) -> None:
        now: datetime = utcnow()
        table = Agent.__table__  # type: ignore[attr-defined]
        with self._writer(), Session(self._engine) as session:
            if latest:
                rows = [
                    {
                        "b_id": agent_id,
                        "b_seen": now,
                        "b_version": hb.version,
                        "b_instance": hb.instance_id,
                        "b_uptime": hb.uptime_seconds,
                        "b_hb": hb.heartbeat_interval_seconds,
                        "b_metrics": hb.metrics_interval_seconds,
                        "b_sync": hb.sync_interval_seconds,
                        "b_self_update": hb.can_self_update,
                        "b_slug": hb.cluster_slug,
                        "b_leader": hb.leader,
                    }
                    for agent_id, hb in latest.items()
                ]
                stmt = (
                    update(table)
                    .where(table.c.id == bindparam("b_id"))
                    .where(table.c.revoked_at.is_(None))
                    .values(
                        last_seen_at=bindparam("b_seen"),
                        last_heartbeat_at=bindparam("b_seen"),
                        version=bindparam("b_version"),
                        instance_id=bindparam("b_instance"),
                        uptime_seconds=bindparam("b_uptime"),
                        heartbeat_interval_seconds=bindparam("b_hb"),
                        metrics_interval_seconds=bindparam("b_metrics"),
                        sync_interval_seconds=bindparam("b_sync"),
                        can_self_update=bindparam("b_self_update"),
                        cluster_slug=bindparam("b_slug"),
                        leader=bindparam("b_leader"),
                    )
                )
                session.connection().execute(stmt, rows)
            if metrics:
                session.connection().execute(
                    update(table)
                    .where(table.c.id == bindparam("b_id"))
                    .values(last_metrics=bindparam("b_m")),
                    [
                        {"b_id": agent_id, "b_m": m.model_dump(mode="json", exclude={"agent_id"})}
                        for agent_id, m in metrics.items()
                    ],
                )
            for change in changes:
                agent = session.get(Agent, change.agent_id)
                if agent is None:
                    continue
                if change.shared and agent.shared_identity_since is None:
                    agent.shared_identity_since = now
                    session.add(
                        AgentEvent(
                            agent_id=agent.id,
                            kind="shared_identity",
                            message=f"{len(change.instances)} processes heartbeat as this identity",
                            detail={
                                "instances": list(change.instances),
                                "versions": list(change.versions),
                            },
                        )
                    )
                elif not change.shared and agent.shared_identity_since is not None:
                    agent.shared_identity_since = None
                    session.add(
                        AgentEvent(
                            agent_id=agent.id,
                            kind="shared_identity_cleared",
                            message="one process heartbeats as this identity again",
                            detail={},
                        )
                    )
                if change.flapping and agent.version_flapping_since is None:
                    agent.version_flapping_since = now
                    session.add(
                        AgentEvent(
                            agent_id=agent.id,
                            kind="version_flapping",
                            message="reported version flaps between " + ", ".join(change.versions),
                            detail={"versions": list(change.versions)},
                        )
                    )
                elif not change.flapping:
                    agent.version_flapping_since = None
                session.add(agent)
            session.commit()
