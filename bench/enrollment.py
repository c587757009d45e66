"""Enrollments per second and latency percentiles against a real Console on SQLite.

    .venv/bin/python -m bench.enrollment [--agents 1000] [--concurrency 16]
        [--profile enroll.prof] [--top 25]

``--profile`` runs the Console under cProfile (all threads, ``bench.profiled_console``) and
prints its top frames by own time and by cumulative time; profiling slows it down, so the
figures of a profiled run are not the benchmark's.

Goal (issue 2): >= 200 enrollments/s, p99 <= 100 ms. The Console's CPU time per enrollment is
printed too: on a shared, busy machine it moves far less than throughput and latency do.
Every enrollment is a real one: signature
check, token check, a new record with evidence, and the NATS authorization reload that makes
its key usable before the answer returns.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from testkit.console import ConsoleProcess, Identity


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its waited-for children so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:13])
    return ticks / os.sysconf("SC_CLK_TCK")


async def run(console: ConsoleProcess, agents: int, concurrency: int) -> dict[str, float]:
    token = console.install_token()
    assert console.process is not None
    cpu_before = cpu_seconds(console.process.pid)
    idents = [Identity(name=f"bench-{i:05d}", machine_id=f"m-{i}") for i in range(agents)]
    bodies = [i.enroll_body(token) for i in idents]
    latencies: list[float] = []
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)

    async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:

        async def worker() -> None:
            while True:
                try:
                    body = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                t0 = time.perf_counter()
                r = await client.post("/api/v1/agents/enroll", json=body)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 201:
                    raise RuntimeError(f"enrollment failed: {r.status_code} {r.text}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    cpu = cpu_seconds(console.process.pid) - cpu_before
    return {
        "cpu_ms": cpu / agents * 1000,
        "agents": agents,
        "concurrency": concurrency,
        "seconds": elapsed,
        "per_second": agents / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": pct(latencies, 99) * 1000,
        "max_ms": max(latencies) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        command, env = None, {}
        if args.profile:
            command = [sys.executable, "-m", "bench.profiled_console"]
            env["PROXIMA_PROFILE_OUT"] = str(args.profile.resolve())
        console = ConsoleProcess(Path(tmp) / "console", command=command, env=env)
        console.start(timeout=300 if args.profile else 30)
        try:
            result = asyncio.run(run(console, args.agents, args.concurrency))
            metrics = httpx.get(f"{console.url}/metrics").text
        finally:
            console.stop()
    print(
        f"enrollments: {result['agents']:.0f} in {result['seconds']:.2f} s = "
        f"{result['per_second']:.0f}/s (goal >= 200/s); latency p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms (goal <= 100 ms), max {result['max_ms']:.1f} ms; "
        f"concurrency {result['concurrency']:.0f}, SQLite; Console CPU "
        f"{result['cpu_ms']:.2f} ms per enrollment"
    )
    for name in (
        "proxima_enroll_db_seconds",
        "proxima_enroll_nats_apply_seconds",
        "proxima_nats_claims_push_seconds",
    ):
        total = _metric(metrics, f"{name}_sum")
        count = _metric(metrics, f"{name}_count")
        if count:
            print(f"  {name}: {count:.0f} observations, mean {total / count * 1000:.1f} ms")
    if args.profile:
        for order in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(str(args.profile), stream=out).sort_stats(order).print_stats(args.top)
            print(out.getvalue())


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


if __name__ == "__main__":
    main()
