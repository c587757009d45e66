"""Pending inventory chunks stay within their limits (what broke: 300 chunks of a sync announcing
10^9 were kept forever). In-process, with a fake clock."""

from __future__ import annotations

import pytest

from console.ingest import ChunkLimits, ChunkRefusedError, PendingChunks
from contracts.inventory import ChunkHeader


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _header(seq: int, total: int, sync_id: str = "s", sha: str = "0" * 64) -> ChunkHeader:
    return ChunkHeader(sync_id=sync_id, seq=seq, total=total, sha256=sha)


def _pending(**limits: float) -> tuple[PendingChunks, Clock]:
    clock = Clock()
    defaults = {"max_chunks": 8, "max_bytes": 1000, "max_bytes_total": 2500, "max_age_seconds": 10}
    return PendingChunks(ChunkLimits(**{**defaults, **limits}), clock), clock  # type: ignore[arg-type]


def test_a_complete_sync_comes_back_in_order_and_leaves_nothing_behind() -> None:
    pending, _ = _pending()
    assert pending.add("a", _header(1, 2), b"world") is None
    parts = pending.add("a", _header(0, 2), b"hello")
    assert parts is not None
    assert sorted((h.seq, p) for h, p in parts) == [(0, b"hello"), (1, b"world")]
    assert pending.total_bytes == 0 and pending.pending_chunks() == 0


def test_more_chunks_announced_than_the_limit_are_refused_at_once() -> None:
    pending, _ = _pending()
    with pytest.raises(ChunkRefusedError) as refused:
        pending.add("a", _header(0, 9), b"x")
    assert refused.value.reason == "too_many_chunks"
    assert pending.pending_chunks() == 0


def test_bytes_over_the_agent_limit_drop_the_sync() -> None:
    pending, _ = _pending()
    for seq in range(3):
        pending.add("a", _header(seq, 8), b"x" * 300)
    with pytest.raises(ChunkRefusedError) as refused:
        pending.add("a", _header(3, 8), b"x" * 300)
    assert refused.value.reason == "too_many_bytes"
    assert pending.pending_bytes("a") == 0 and pending.total_bytes == 0


def test_a_repeated_seq_replaces_its_chunk_instead_of_piling_up() -> None:
    pending, _ = _pending()
    for _ in range(100):
        pending.add("a", _header(0, 8), b"x" * 100)
    assert pending.pending_chunks("a") == 1 and pending.pending_bytes("a") == 100


def test_a_new_sync_replaces_the_agents_older_one_and_disagreeing_headers_drop_it() -> None:
    pending, _ = _pending()
    pending.add("a", _header(0, 4, "old"), b"x" * 100)
    pending.add("a", _header(0, 4, "new"), b"y" * 10)
    assert pending.pending_bytes("a") == 10
    with pytest.raises(ChunkRefusedError):
        pending.add("a", _header(1, 5, "new"), b"z")
    assert pending.pending_chunks("a") == 0


def test_the_total_limit_sheds_the_oldest_syncs_of_other_agents_first() -> None:
    pending, clock = _pending()
    for i, agent in enumerate("abc"):
        clock.now = i
        pending.add(agent, _header(0, 8), b"x" * 900)
    assert pending.total_bytes <= 2500
    assert pending.pending_bytes("a") == 0
    assert pending.pending_bytes("b") == 900 and pending.pending_bytes("c") == 900


def test_an_incomplete_sync_expires_after_the_age_limit() -> None:
    pending, clock = _pending()
    pending.add("a", _header(0, 2), b"x")
    clock.now = 5
    assert pending.expire() == []
    clock.now = 11
    assert pending.expire() == ["a"]
    assert pending.total_bytes == 0
