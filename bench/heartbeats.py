"""Heartbeat ingest: the Console's CPU time per heartbeat, its throughput and lag.

    .venv/bin/python -m bench.heartbeats [--agents 20000] [--rate 4000] [--seconds 20]
        [--database sqlite|postgres] [--profile hb.prof] [--top 25]

Goal (docs/performance.md): <= 25 us of Console CPU per heartbeat (>= 40,000/s per core), p99 lag
<= 500 ms. The agents are preloaded rows and their heartbeats come from a separate generator
process over 4 NATS connections (``bench.fleet_load``: how, and what that leaves out); the
Console's CPU (user + system of its own process, read from ``/proc``; its embedded nats-server
is a child process and is reported apart) is counted over a window after a warm-up, against
the heartbeats it committed in that window (``proxima_heartbeats_ingested_total``), so the
generator's own cost and the machine's other load do not enter the figure. Each agent beats
every ``agents / rate`` seconds: with as many agents as a batch holds, each heartbeat is its
own row's UPDATE (the 100,000-agent case); with few agents, batches coalesce.

Lag is measured by the Console (``sent_at`` in the message → its batch committed), read from
``/metrics`` as the histogram bucket under which 99% of the window's heartbeats fall.
``--database postgres`` runs the Console on a throwaway PostgreSQL cluster (testkit's, as the
tests' postgres lane: ``fsync=off``); the database's writes are then another process's CPU,
which is printed beside the Console's (the server and all its backends, exited ones included).
``--profile`` runs the Console under ``bench.profiled_console`` (cProfile, every thread, CPU
time): read its figures as shares, profiling slows the Console ~3x.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pstats
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from bench.fleet_load import (
    Generator,
    metric,
    nats_server_pid,
    p99_from_buckets,
    pid_cpu_seconds,
    preload_agents,
)
from testkit.console import ConsoleProcess

INGESTED = "proxima_heartbeats_ingested_total"
LAG = "proxima_heartbeat_ingest_lag_seconds"


def postgres_cpu_seconds(datadir: Path | None) -> float:
    """CPU of a PostgreSQL server: the postmaster, its children that exited (their time is
    added to its own once it reaps them) and those alive now. 0 without one."""
    if datadir is None:
        return 0.0
    postmaster = int((datadir / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    total = sum(int(f) for f in fields[11:15]) / ticks  # utime, stime, cutime, cstime
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    for child in children:
        with contextlib.suppress(OSError):  # a backend that exited just now
            total += pid_cpu_seconds(int(child))
    return total


def measure(
    console: ConsoleProcess,
    agents: int,
    rate: float,
    seconds: float,
    warmup: float,
    tmp: Path,
    pg_datadir: Path | None = None,
) -> dict[str, float]:
    ids = preload_agents(console, agents)
    console.start(timeout=300)
    assert console.process is not None
    pid, nats_pid = console.process.pid, nats_server_pid(console)
    generator = Generator(console, ids, interval=agents / rate, workdir=tmp)
    try:
        time.sleep(warmup)
        before = httpx.get(f"{console.url}/metrics").text
        cpu0, nats0, sent0 = pid_cpu_seconds(pid), nats_cpu(nats_pid), generator.sent
        pg0 = postgres_cpu_seconds(pg_datadir)
        t0 = time.perf_counter()
        time.sleep(seconds)
        cpu1, nats1, sent1 = pid_cpu_seconds(pid), nats_cpu(nats_pid), generator.sent
        pg1 = postgres_cpu_seconds(pg_datadir)
        elapsed = time.perf_counter() - t0
        after = httpx.get(f"{console.url}/metrics").text
    finally:
        generator.close()
    ingested = metric(after, INGESTED) - metric(before, INGESTED)
    lag_sum = metric(after, f"{LAG}_sum") - metric(before, f"{LAG}_sum")
    lag_count = metric(after, f"{LAG}_count") - metric(before, f"{LAG}_count")
    return {
        "agents": agents,
        "offered": (sent1 - sent0) / elapsed,
        "ingested": ingested / elapsed,
        "cpu_us": (cpu1 - cpu0) / max(1.0, ingested) * 1e6,
        "cpu_share": (cpu1 - cpu0) / elapsed,
        "nats_us": (nats1 - nats0) / max(1.0, ingested) * 1e6,
        "pg_us": (pg1 - pg0) / max(1.0, ingested) * 1e6,
        "p99_lag": p99_from_buckets(after, LAG, since=before),
        "mean_lag": lag_sum / max(1.0, lag_count),
        "batches": metric(after, "proxima_heartbeat_flush_seconds_count")
        - metric(before, "proxima_heartbeat_flush_seconds_count"),
    }


def nats_cpu(pid: int | None) -> float:
    return pid_cpu_seconds(pid) if pid else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20000)
    parser.add_argument("--rate", type=float, default=4000, help="heartbeats per second offered")
    parser.add_argument("--seconds", type=float, default=20, help="the measured window")
    parser.add_argument("--warmup", type=float, default=8)
    parser.add_argument("--flush-seconds", default="0.2", help="PROXIMA_HEARTBEAT_FLUSH_SECONDS")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        database_url, pg_datadir = None, None
        if args.database == "postgres":
            from testkit.postgres import ThrowawayPostgres

            pg = ThrowawayPostgres()
            pg.start()
            stack.callback(pg.stop)
            database_url, pg_datadir = pg.create_database(), pg.datadir
        command, env = (
            None,
            {
                "PROXIMA_HEARTBEAT_FLUSH_SECONDS": args.flush_seconds,
                "PROXIMA_LOG_LEVEL": "warning",
            },
        )
        if args.profile:
            command = [sys.executable, "-m", "bench.profiled_console"]
            env["PROXIMA_PROFILE_OUT"] = str(args.profile.resolve())
        console = ConsoleProcess(
            Path(tmp) / "console", database_url=database_url, command=command, env=env
        )
        console.data_dir.mkdir(parents=True)
        console.bootstrap_info = console.bootstrap()
        console.token = console.bootstrap_info["token"]
        try:
            r = measure(
                console, args.agents, args.rate, args.seconds, args.warmup, Path(tmp), pg_datadir
            )
            if args.profile and console.process is not None:
                console.process.send_signal(signal.SIGTERM)  # the stats take a while to write
                console.process.wait(timeout=300)
        finally:
            console.stop()
    met = r["cpu_us"] <= 25 and r["p99_lag"] <= 0.5
    print(
        f"heartbeat ingest, {r['agents']:,.0f} agents, {args.database}: Console CPU "
        f"{r['cpu_us']:.1f} us "
        f"per heartbeat (goal <= 25 us) = {1e6 / r['cpu_us']:,.0f}/s per core; "
        f"p99 lag <= {r['p99_lag'] * 1000:.0f} ms (goal <= 500 ms), mean "
        f"{r['mean_lag'] * 1000:.0f} ms; {'met' if met else 'NOT met'}\n"
        f"  offered {r['offered']:,.0f}/s, committed {r['ingested']:,.0f}/s in "
        f"{r['batches']:.0f} batches; Console busy {r['cpu_share']:.2f} CPU; nats-server "
        f"{r['nats_us']:.1f} us per heartbeat"
        + (f"; PostgreSQL server {r['pg_us']:.1f} us per heartbeat" if pg_datadir else "")
    )
    if args.profile:
        for order in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(str(args.profile), stream=out).sort_stats(order).print_stats(args.top)
            print(out.getvalue())


if __name__ == "__main__":
    main()
