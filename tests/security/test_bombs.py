"""Inventory bombs, against a real Console, real NATS and enrolled agents.

What broke: one enrolled agent of any type sent a 1 MB inventory message that gunzipped to
1000 MiB (Console RSS 2.1 GB, ``/healthz`` frozen 6 s); 300 chunks of a sync announcing 10^9
chunks were kept forever; a host agent published a snapshot for a cluster of its environment.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
import uuid
import zlib
from datetime import UTC, datetime

import httpx
import nats
import psutil
import pytest

from contracts import subjects
from contracts.inventory import ChunkHeader, InventorySnapshot, ObjectSummary, encode_chunks
from testkit.console import ConsoleProcess, Identity
from testkit.k8s import register_cluster
from testkit.waiting import wait_for

MiB = 1024 * 1024


def _bomb(inflated: int) -> bytes:
    """A gzip stream of ``inflated`` bytes of spaces, made without holding them."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * MiB
    out = [deflater.compress(block) for _ in range(inflated // MiB)]
    out.append(deflater.flush())
    return b"".join(out)


def _chunks(blob: bytes, size: int, sync_id: str | None = None) -> list[bytes]:
    sync_id = sync_id or uuid.uuid4().hex
    digest = hashlib.sha256(blob).hexdigest()
    parts = [blob[i : i + size] for i in range(0, len(blob), size)]
    return [
        ChunkHeader(sync_id=sync_id, seq=i, total=len(parts), sha256=digest)
        .model_dump_json()
        .encode()
        + b"\n"
        + part
        for i, part in enumerate(parts)
    ]


def _snapshot(slug: str) -> InventorySnapshot:
    return InventorySnapshot(
        cluster_slug=slug,
        cluster_name=slug,
        collected_at=datetime.now(UTC),
        sync_interval_seconds=300,
        counts={"pods": 2},
        objects={"pods": [ObjectSummary(name=f"p{i}", namespace="x") for i in range(2)]},
    )


async def _publish(console: ConsoleProcess, ident: Identity, agent_id: str, chunks: list[bytes]):
    nc = await nats.connect(console.nats_url, **ident.nats_options())
    try:
        for chunk in chunks:
            await nc.publish(subjects.inventory(agent_id), chunk)
        await nc.flush(timeout=60)
    finally:
        await nc.close()


def _metric(console: ConsoleProcess, name: str) -> float:
    text = httpx.get(f"{console.url}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.e+-]+)$", line)
        if match:
            total += float(match.group(2))
    return total


def _collector(console: ConsoleProcess, name: str = "Bombed") -> tuple[str, Identity, str]:
    slug, token = register_cluster(console, name)
    ident = Identity(name=f"collector-{uuid.uuid4().hex[:6]}", agent_type="k8s-cluster-collector")
    r = ident.enroll(console, token)
    assert r.status_code == 201, r.text
    return slug, ident, r.json()["agent_id"]


class _HealthProbe:
    """Polls ``/healthz`` from a thread and keeps the slowest answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.slowest = 0.0
        self.answers = 0
        self.times: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                assert client.get(f"{self.url}/healthz").status_code == 200
                took = time.perf_counter() - started
                self.times.append((started, took))
                self.slowest = max(self.slowest, took)
                self.answers += 1
                self._stop.wait(0.05)

    def __enter__(self) -> _HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_gzip_bomb_neither_blows_the_console_rss_nor_freezes_healthz(
    console: ConsoleProcess,
) -> None:
    slug, ident, agent_id = _collector(console)
    bomb = _bomb(1000 * MiB)
    assert len(bomb) < 1100 * 1024, "about 1 MB on the wire"
    assert console.process is not None
    proc = psutil.Process(console.process.pid)
    before = proc.memory_info().rss
    refused = _metric(console, "proxima_inventory_refused_total")
    peak = before
    with _HealthProbe(console.url) as probe:
        asyncio.run(_publish(console, ident, agent_id, _chunks(bomb, 512 * 1024)))

        def refused_now() -> bool:
            nonlocal peak
            peak = max(peak, proc.memory_info().rss)
            return _metric(console, "proxima_inventory_refused_total") > refused

        wait_for(refused_now, timeout=60, what="the bomb refused")
        time.sleep(0.3)  # a few more probes after the refusal
    peak = max(peak, proc.memory_info().rss)
    growth = (peak - before) / MiB
    print(
        f"\ngzip bomb (1000 MiB in {len(bomb)} bytes): Console RSS {before / MiB:.0f} MiB -> "
        f"peak {peak / MiB:.0f} MiB (+{growth:.0f} MiB); /healthz slowest "
        f"{probe.slowest * 1000:.0f} ms over {probe.answers} answers"
    )
    print([(round(t - probe.times[0][0], 2), round(d, 3)) for t, d in probe.times if d > 0.2])
    assert growth < 200, f"RSS grew by {growth:.0f} MiB"
    assert probe.answers > 0 and probe.slowest < 1.0
    with console.client() as c:
        assert c.get(f"/api/v1/clusters/{slug}").json()["last_inventory_at"] is None
    assert "inflates past" in console.log_path.read_text()
    # The same collector's real snapshot is still taken afterwards.
    asyncio.run(_publish(console, ident, agent_id, encode_chunks(_snapshot(slug), "ok")))
    with console.client() as c:
        wait_for(
            lambda: c.get(f"/api/v1/clusters/{slug}").json()["last_inventory_at"],
            what="a good snapshot after the bomb",
        )


@pytest.fixture
def tight_console(console_factory) -> ConsoleProcess:
    return console_factory(
        env={
            "PROXIMA_INVENTORY_MAX_PENDING_BYTES": str(8 * MiB),
            "PROXIMA_INVENTORY_MAX_PENDING_CHUNKS": "64",
            "PROXIMA_INVENTORY_CHUNK_MAX_AGE_SECONDS": "2",
        }
    ).start()


def test_a_chunk_flood_never_accumulates_past_the_pending_limits(
    tight_console: ConsoleProcess,
) -> None:
    console = tight_console
    _slug, ident, agent_id = _collector(console, "Flooded")
    # 10^9 announced chunks: not even a header the contract accepts.
    huge = json.dumps({"sync_id": "s", "seq": 0, "total": 10**9, "sha256": "0" * 64}).encode()
    asyncio.run(_publish(console, ident, agent_id, [huge + b"\n" + b"x" * 1024]))
    # A sync announcing more chunks than the Console keeps for one agent: refused at once.
    over = ChunkHeader(sync_id="over", seq=0, total=4096, sha256="0" * 64)
    asyncio.run(_publish(console, ident, agent_id, [over.model_dump_json().encode() + b"\n"]))
    # 300 chunks of 256 KiB (75 MiB) of syncs within the count limit: the byte limit holds.
    flood = [
        ChunkHeader(sync_id="flood", seq=i % 64, total=64, sha256="0" * 64)
        .model_dump_json()
        .encode()
        + b"\n"
        + bytes(range(256)) * 1024
        for i in range(300)
    ]
    samples: list[tuple[float, float]] = []

    async def attack() -> None:
        nc = await nats.connect(console.nats_url, **ident.nats_options())
        try:
            for i, chunk in enumerate(flood):
                await nc.publish(subjects.inventory(agent_id), chunk)
                if i % 25 == 0:
                    await nc.flush()
                    samples.append(
                        (
                            _metric(console, "proxima_inventory_pending_bytes"),
                            _metric(console, "proxima_inventory_pending_chunks"),
                        )
                    )
            await nc.flush(timeout=60)
        finally:
            await nc.close()

    asyncio.run(attack())
    samples.append(
        (
            _metric(console, "proxima_inventory_pending_bytes"),
            _metric(console, "proxima_inventory_pending_chunks"),
        )
    )
    worst_bytes = max(b for b, _ in samples)
    worst_chunks = max(c for _, c in samples)
    print(
        f"\nchunk flood (300 x 256 KiB): pending at most {worst_bytes / MiB:.1f} MiB "
        f"and {worst_chunks:.0f} chunks (limits 8 MiB, 64 chunks)"
    )
    assert worst_bytes <= 8 * MiB and worst_chunks <= 64
    assert _metric(console, "proxima_inventory_refused_total") >= 2
    assert "a sync of 4096 chunks (limit 64)" in console.log_path.read_text()
    assert "bytes of chunks waiting" in console.log_path.read_text()
    # What is left of an incomplete sync goes after the age limit.
    _, ident2, agent2 = _collector(console, "Slow")
    asyncio.run(_publish(console, ident2, agent2, flood[:3]))
    wait_for(
        lambda: _metric(console, "proxima_inventory_pending_bytes") == 0,
        timeout=15,
        what="the stale sync dropped",
    )
    assert "incomplete after" in console.log_path.read_text()


def test_a_host_agent_cannot_publish_a_snapshot_for_a_cluster_of_its_environment(
    console: ConsoleProcess,
) -> None:
    slug, _token = register_cluster(console, "Target")
    host = Identity(name=f"host-{uuid.uuid4().hex[:6]}", agent_type="host")
    r = host.enroll(console, console.install_token())
    assert r.status_code == 201, r.text
    host_id = r.json()["agent_id"]
    asyncio.run(_publish(console, host, host_id, encode_chunks(_snapshot(slug), "h")))
    asyncio.run(_publish(console, host, host_id, encode_chunks(_snapshot("new-one"), "h2")))
    wait_for(
        lambda: "does not send inventory" in console.log_path.read_text(),
        what="the refusal logged",
    )
    with console.client() as c:
        assert c.get(f"/api/v1/clusters/{slug}").json()["last_inventory_at"] is None
        assert c.get("/api/v1/clusters/new-one").status_code == 404
    # A collector tied to another cluster is refused for this one too.
    _other, ident, agent_id = _collector(console, "Other")
    asyncio.run(_publish(console, ident, agent_id, encode_chunks(_snapshot(slug), "c")))
    wait_for(
        lambda: f"it sent {slug!r}" in console.log_path.read_text(),
        what="the cross-cluster refusal logged",
    )
    with console.client() as c:
        assert c.get(f"/api/v1/clusters/{slug}").json()["last_inventory_at"] is None
