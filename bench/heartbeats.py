"""Heartbeats ingested per second through NATS into the database, and the lag.

    .venv/bin/python -m bench.heartbeats [--agents 300] [--rate 4000] [--seconds 10]

Goal (issue 2): >= 3,000 heartbeats/s with p99 lag <= 500 ms. Each simulated agent is a real
enrolled identity on its own NATS connection with its own nkey, publishing real Heartbeat
messages under its own subject; the Console's ingester writes them in batches. Lag is measured
by the Console itself (send time in the message → batch committed), read from /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import nats

from contracts import subjects
from testkit.console import ConsoleProcess, Identity


def _metric(text: str, name: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.split()[-1])
    return 0.0


def _p99_from_buckets(text: str, name: str) -> float:
    buckets = []
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0
    for le, count in buckets:
        if total and count >= 0.99 * total:
            return le
    return float("nan")


async def run(console: ConsoleProcess, agents: int, rate: int, seconds: float) -> dict[str, float]:
    token = console.install_token()
    idents = [Identity(name=f"hb-{i:05d}") for i in range(agents)]
    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
        sem = asyncio.Semaphore(8)

        async def enroll(ident: Identity) -> str:
            async with sem:
                r = await client.post("/api/v1/agents/enroll", json=ident.enroll_body(token))
                r.raise_for_status()
                ident.jwt = r.json()["nats_jwt"]
                return str(r.json()["agent_id"])

        ids = await asyncio.gather(*(enroll(i) for i in idents))
    conns = [
        await nats.connect(console.nats_url, allow_reconnect=False, **i.nats_options())
        for i in idents
    ]
    before = httpx.get(f"{console.url}/metrics").text
    base_count = _metric(before, "proxima_heartbeats_ingested_total")
    per_agent_interval = agents / rate
    sent = 0
    start = time.perf_counter()

    async def agent_loop(nc: nats.NATS, agent_id: str, ident: Identity, offset: float) -> None:
        nonlocal sent
        await asyncio.sleep(offset)
        nxt = time.perf_counter()
        while time.perf_counter() - start < seconds:
            body = json.dumps(
                {
                    "agent_id": agent_id,
                    "instance_id": ident.instance_id,
                    "agent_type": "host",
                    "version": "0.8.0",
                    "sent_at": datetime.now(UTC).isoformat(),
                    "uptime_seconds": time.perf_counter() - start,
                    "heartbeat_interval_seconds": per_agent_interval,
                }
            ).encode()
            await nc.publish(subjects.heartbeat(agent_id), body)
            sent += 1
            nxt += per_agent_interval
            await asyncio.sleep(max(0.0, nxt - time.perf_counter()))

    await asyncio.gather(
        *(
            agent_loop(nc, aid, ident, per_agent_interval * k / agents)
            for k, (nc, aid, ident) in enumerate(zip(conns, ids, idents, strict=True))
        )
    )
    for nc in conns:
        await nc.flush()
    send_elapsed = time.perf_counter() - start
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline:
        text = httpx.get(f"{console.url}/metrics").text
        if _metric(text, "proxima_heartbeats_ingested_total") - base_count >= sent:
            break
        await asyncio.sleep(0.05)
    done_elapsed = time.perf_counter() - start
    for nc in conns:
        await nc.close()
    ingested = _metric(text, "proxima_heartbeats_ingested_total") - base_count
    return {
        "agents": agents,
        "sent": sent,
        "ingested": ingested,
        "send_seconds": send_elapsed,
        "per_second": ingested / done_elapsed,
        "offered_per_second": sent / send_elapsed,
        "p99_lag_le": _p99_from_buckets(text, "proxima_heartbeat_ingest_lag_seconds"),
        "mean_lag": _metric(text, "proxima_heartbeat_ingest_lag_seconds_sum")
        / max(1.0, _metric(text, "proxima_heartbeat_ingest_lag_seconds_count")),
        "flushes": _metric(text, "proxima_heartbeat_flush_seconds_count"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=300)
    parser.add_argument("--rate", type=int, default=4000, help="heartbeats per second offered")
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        console = ConsoleProcess(
            Path(tmp) / "console", env={"PROXIMA_HEARTBEAT_FLUSH_SECONDS": "0.1"}
        )
        console.start()
        try:
            r = asyncio.run(run(console, args.agents, args.rate, args.seconds))
        finally:
            console.stop()
    print(
        f"heartbeats: {r['ingested']:.0f} of {r['sent']:.0f} ingested "
        f"from {r['agents']:.0f} agents "
        f"= {r['per_second']:.0f}/s (offered {r['offered_per_second']:.0f}/s; goal >= 3000/s); "
        f"lag mean {r['mean_lag'] * 1000:.0f} ms, p99 <= {r['p99_lag_le'] * 1000:.0f} ms "
        f"(histogram bucket; goal <= 500 ms); {r['flushes']:.0f} batch writes, SQLite"
    )


if __name__ == "__main__":
    main()
