"""Inventory chunks in flight: each agent's sync held within per-agent and total limits
(count, bytes, age: the ``inventory_*`` settings) until it is complete."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from contracts.inventory import ChunkHeader

__all__ = ["INVENTORY_REFUSED", "ChunkLimits", "ChunkRefusedError", "PendingChunks"]

log = logging.getLogger(__name__)

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
