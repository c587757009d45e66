"""Heartbeat ingest: the Console's CPU time per heartbeat, its throughput and lag.

    .venv/bin/python -m bench.heartbeats [--agents 20000] [--rate 4000] [--seconds 20]
        [--profile hb.prof] [--top 25]

Goal (issue 14): <= 25 us of Console CPU per heartbeat (>= 40,000/s per core), p99 lag
<= 500 ms. The agents are seeded rows and their heartbeats come from a separate generator
process over 4 NATS connections (``bench.fleet_load``: how, and what that leaves out); the
Console's CPU (user + system of its own process, read from ``/proc``; its embedded nats-server
is a child process and is reported apart) is counted over a window after a warm-up, against
the heartbeats it committed in that window (``proxima_heartbeats_ingested_total``), so the
generator's own cost and the machine's other load do not enter the figure. Each agent beats
every ``agents / rate`` seconds: with as many agents as a batch holds, each heartbeat is its
own row's UPDATE (the 100,000-agent case); with few agents, batches coalesce.

Lag is measured by the Console (``sent_at`` in the message → its batch committed), read from
``/metrics`` as the histogram bucket under which 99% of the window's heartbeats fall.
``--profile`` runs the Console under ``bench.profiled_console`` (cProfile, every thread, CPU
time): read its figures as shares, profiling slows the Console ~3x.
"""

from __future__ import annotations

import argparse
import io
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.fleet_load import (
    Generator,
    metric,
    nats_server_pid,
    p99_from_buckets,
    pid_cpu_seconds,
    seed_agents,
)
from testkit.console import ConsoleProcess

INGESTED = "proxima_heartbeats_ingested_total"
LAG = "proxima_heartbeat_ingest_lag_seconds"


def measure(
    console: ConsoleProcess, agents: int, rate: float, seconds: float, warmup: float, tmp: Path
) -> dict[str, float]:
    ids = seed_agents(console, agents)
    console.start(timeout=300)
    assert console.process is not None
    pid, nats_pid = console.process.pid, nats_server_pid(console)
    generator = Generator(console, ids, interval=agents / rate, workdir=tmp)
    try:
        time.sleep(warmup)
        before = httpx.get(f"{console.url}/metrics").text
        cpu0, nats0, sent0 = pid_cpu_seconds(pid), nats_cpu(nats_pid), generator.sent
        t0 = time.perf_counter()
        time.sleep(seconds)
        cpu1, nats1, sent1 = pid_cpu_seconds(pid), nats_cpu(nats_pid), generator.sent
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
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
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
        console = ConsoleProcess(Path(tmp) / "console", command=command, env=env)
        console.data_dir.mkdir(parents=True)
        console.bootstrap_info = console.bootstrap()
        console.token = console.bootstrap_info["token"]
        try:
            r = measure(console, args.agents, args.rate, args.seconds, args.warmup, Path(tmp))
            if args.profile and console.process is not None:
                console.process.send_signal(signal.SIGTERM)  # the stats take a while to write
                console.process.wait(timeout=300)
        finally:
            console.stop()
    met = r["cpu_us"] <= 25 and r["p99_lag"] <= 0.5
    print(
        f"heartbeat ingest, {r['agents']:,.0f} agents, SQLite: Console CPU {r['cpu_us']:.1f} us "
        f"per heartbeat (goal <= 25 us) = {1e6 / r['cpu_us']:,.0f}/s per core; "
        f"p99 lag <= {r['p99_lag'] * 1000:.0f} ms (goal <= 500 ms), mean "
        f"{r['mean_lag'] * 1000:.0f} ms; {'met' if met else 'NOT met'}\n"
        f"  offered {r['offered']:,.0f}/s, committed {r['ingested']:,.0f}/s in "
        f"{r['batches']:.0f} batches; Console busy {r['cpu_share']:.2f} CPU; nats-server "
        f"{r['nats_us']:.1f} us per heartbeat"
    )
    if args.profile:
        for order in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(str(args.profile), stream=out).sort_stats(order).print_stats(args.top)
            print(out.getvalue())


if __name__ == "__main__":
    main()
