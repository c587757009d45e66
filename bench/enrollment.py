"""Enrollments per second, latency percentiles and the Console's CPU per enrollment, against a
real Console on SQLite or a throwaway PostgreSQL (testkit's, as the tests' postgres lane).

    .venv/bin/python -m bench.enrollment [--agents 1000] [--concurrency 16]
        [--database sqlite|postgres] [--client raw|httpx] [--warmup 200]
        [--profile enroll.prof] [--top 25]

Every enrollment is a real one: signature and its age, install token, evidence and the
identity rules, key uniqueness and retirement, the shared rate limits (their limits raised
for the run so they never refuse: every hit is still counted in the database), a new record
with evidence, the audit line, a NATS user JWT.

The load generator shares the machine with the Console, so it is made cheap: every body is
signed and serialised before the clock starts, and the default client (``raw``) writes
pre-built HTTP/1.1 requests on keep-alive connections (asyncio streams) and reads only the
status line, headers and body — ``httpx`` costs several times as much CPU per request. Its
own CPU per request is printed beside the Console's.

``--warmup`` enrollments run first, untimed (the first requests of a fresh process pay for
imports and caches). ``--profile`` runs the Console under cProfile (all threads,
``bench.profiled_console``) and prints its top frames; profiling slows it down, so the figures
of a profiled run are not the benchmark's.

Goal: >= 1,000 enrollments/s at concurrency 16, p99 <= 100 ms. The Console's CPU
time per enrollment moves far less with the machine's load than throughput and latency do.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from testkit.console import ConsoleProcess, Identity

_PATH = "/api/v1/agents/enroll"
# Counted as always, never refusing during the run (the defaults allow 2,000/minute a token).
_UNLIMITED = {
    "PROXIMA_ENROLL_RATE_PER_SOURCE": "1000000/minute",
    "PROXIMA_ENROLL_RATE_PER_TOKEN": "1000000/minute",
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its waited-for children so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:13])
    return ticks / os.sysconf("SC_CLK_TCK")


class RawClient:
    """One keep-alive HTTP/1.1 connection writing pre-built requests: the cheapest client
    asyncio offers, so the generator's CPU goes to the Console."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, request: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines[1:]
            if line[:15].lower() == b"content-length:"
        )
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


def request_bytes(host: str, body: dict[str, object]) -> bytes:
    payload = json.dumps(body).encode()
    return (
        f"POST {_PATH} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    ).encode() + payload


async def enroll_all(
    console: ConsoleProcess, bodies: list[dict[str, object]], concurrency: int, client: str
) -> tuple[list[float], float]:
    """Enroll every body with ``concurrency`` workers; the latencies and the wall time."""
    latencies: list[float] = []
    host = f"127.0.0.1:{console.port}"
    queue: asyncio.Queue[bytes | dict[str, object]] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(request_bytes(host, b) if client == "raw" else b)

    def check(status: int, text: bytes | str) -> None:
        if status != 201:
            raise RuntimeError(f"enrollment failed: {status} {text!r}")

    async with httpx.AsyncClient(base_url=console.url, timeout=60) as http:

        async def worker() -> None:
            raw = RawClient("127.0.0.1", console.port)
            try:
                while True:
                    try:
                        item = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    t0 = time.perf_counter()
                    if isinstance(item, bytes):
                        status, text = await raw.post(item)
                    else:
                        r = await http.post(_PATH, json=item)
                        status, text = r.status_code, r.content
                    latencies.append(time.perf_counter() - t0)
                    check(status, text)
            finally:
                await raw.close()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, time.perf_counter() - started


async def run(
    console: ConsoleProcess, agents: int, concurrency: int, client: str, warmup: int
) -> dict[str, float]:
    token = console.install_token()
    assert console.process is not None
    idents = [Identity(name=f"bench-{i:05d}", machine_id=f"m-{i}") for i in range(agents + warmup)]
    bodies = [i.enroll_body(token) for i in idents]
    if warmup:
        await enroll_all(console, bodies[:warmup], concurrency, client)
    cpu_before = cpu_seconds(console.process.pid)
    own_before = time.process_time()
    latencies, elapsed = await enroll_all(console, bodies[warmup:], concurrency, client)
    own = time.process_time() - own_before
    cpu = cpu_seconds(console.process.pid) - cpu_before
    return {
        "cpu_ms": cpu / agents * 1000,
        "client_ms": own / agents * 1000,
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
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    parser.add_argument("--warmup", type=int, default=200, help="untimed enrollments first")
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        database_url = None
        if args.database == "postgres":
            from testkit.postgres import ThrowawayPostgres

            pg = ThrowawayPostgres()
            pg.start()
            stack.callback(pg.stop)
            database_url = pg.create_database()
        command, env = None, dict(_UNLIMITED)
        if args.profile:
            command = [sys.executable, "-m", "bench.profiled_console"]
            env["PROXIMA_PROFILE_OUT"] = str(args.profile.resolve())
        console = ConsoleProcess(
            Path(tmp) / "console", database_url=database_url, command=command, env=env
        )
        console.start(timeout=300 if args.profile else 30)
        try:
            result = asyncio.run(
                run(console, args.agents, args.concurrency, args.client, args.warmup)
            )
            metrics = httpx.get(f"{console.url}/metrics").text
        finally:
            console.stop()
    print(
        f"enrollments: {result['agents']:.0f} in {result['seconds']:.2f} s = "
        f"{result['per_second']:.0f}/s (goal >= 1,000/s); latency p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms (goal <= 100 ms), max {result['max_ms']:.1f} ms; "
        f"concurrency {result['concurrency']:.0f}, {args.database}, client {args.client}; "
        f"Console CPU {result['cpu_ms']:.2f} ms per enrollment, load generator "
        f"{result['client_ms']:.2f} ms; load average {os.getloadavg()[0]:.1f}"
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
