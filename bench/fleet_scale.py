"""The Console with a large fleet heartbeating: its RSS, the fleet list's latency, its CPU per
heartbeat, and how soon a stopped agent shows offline — at several fleet sizes.

    .venv/bin/python -m bench.fleet_scale [--sizes 10000,50000,100000] [--interval 30]
        [--stale 60] [--seconds 30] [--stop 200]

Goals, at 100,000 enrolled agents heartbeating every 30 s: Console RSS <= 1 GiB,
``GET /api/v1/fleet/agents?limit=50`` p99 <= 50 ms, every stopped agent shown offline <= 75 s
after its last heartbeat. Per size: the agents are preloaded into the database, a separate
generator process beats for all of them (``bench.fleet_load``: 4 NATS connections; what that
leaves out is said there), and after ``--warmup`` seconds, for ``--seconds``:

- the Console's CPU per heartbeat committed (heartbeats alone);
- then, as long again, the fleet list page asked for one after another (all,
  ``status=online``, ``status=offline`` in turn), 20 ms apart, while the heartbeats go on;
- RSS of the Console process (and of its nats-server child) sampled every second over both.

Then the generator stops ``--stop`` agents (it reports each one's last send) and the
benchmark polls ``status=offline`` every 250 ms until each appears: the figure is, per agent,
the time from its last heartbeat to the first answer that shows it offline. It is bounded
below by ``PROXIMA_AGENT_STALE_SECONDS`` (``--stale``): status is computed from the last
heartbeat at query time, so no sweep is involved.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.fleet_load import (
    Generator,
    metric,
    nats_server_pid,
    p99_from_buckets,
    pid_cpu_seconds,
    pid_rss_bytes,
    preload_agents,
)
from testkit.console import ConsoleProcess

PAGES = ({}, {"status": "online"}, {"status": "offline"})
INGESTED = "proxima_heartbeats_ingested_total"
LAG = "proxima_heartbeat_ingest_lag_seconds"
MIB = 1024 * 1024


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class RssSampler(threading.Thread):
    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.samples: list[list[int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.samples.append([pid_rss_bytes(p) for p in self.pids])


def list_latencies(client: httpx.Client, seconds: float) -> list[float]:
    # This client's own full collections (it built the preloaded rows: ~125,000 objects, 60-80 ms a
    # pass on this machine) would be timed as the Console's latency: its heap is frozen first.
    gc.collect()
    gc.freeze()
    timings = []
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        r = client.get("/api/v1/fleet/agents", params={"limit": 50, **PAGES[k % 3]})
        timings.append(time.perf_counter() - t0)
        r.raise_for_status()
        k += 1
        time.sleep(0.02)
    return timings


def offline_delays(
    client: httpx.Client, stopped: dict[str, float], timeout: float
) -> dict[str, float]:
    seen: dict[str, float] = {}
    deadline = time.time() + timeout
    while len(seen) < len(stopped) and time.time() < deadline:
        r = client.get("/api/v1/fleet/agents", params={"limit": 1000, "status": "offline"})
        answered = time.time()
        r.raise_for_status()
        for item in r.json()["items"]:
            if item["id"] in stopped and item["id"] not in seen:
                seen[item["id"]] = answered - stopped[item["id"]]
        time.sleep(0.25)
    return seen


def run_size(size: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        command = None
        if args.switch_interval:
            # the Console with a shorter GIL switch interval (``sys.setswitchinterval``)
            command = [
                sys.executable,
                "-c",
                f"import runpy, sys; sys.setswitchinterval({args.switch_interval}); "
                "sys.argv = ['console', 'serve']; runpy.run_module('console', "
                "run_name='__main__', alter_sys=True)",
            ]
        console = ConsoleProcess(
            Path(tmp) / "console",
            command=command,
            env={
                "PROXIMA_AGENT_STALE_SECONDS": str(args.stale),
                "PROXIMA_HEARTBEAT_FLUSH_SECONDS": "0.2",
                "PROXIMA_LOG_LEVEL": "warning",
            },
        )
        console.data_dir.mkdir(parents=True)
        console.bootstrap_info = console.bootstrap()
        console.token = console.bootstrap_info["token"]
        t0 = time.perf_counter()
        ids = preload_agents(console, size)
        preloaded = time.perf_counter() - t0
        console.start(timeout=300)
        generator = None
        try:
            assert console.process is not None
            pid, nats_pid = console.process.pid, nats_server_pid(console)
            with console.client() as client:  # the same pages, no heartbeats yet
                quiet = list_latencies(client, args.idle_seconds)
            generator = Generator(console, ids, interval=args.interval, workdir=Path(tmp))
            time.sleep(args.warmup)
            sampler = RssSampler([pid, nats_pid or pid])
            sampler.start()
            before = httpx.get(f"{console.url}/metrics").text
            cpu0 = pid_cpu_seconds(pid)
            time.sleep(args.seconds)  # heartbeats alone: the Console's CPU per heartbeat
            cpu1 = pid_cpu_seconds(pid)
            after = httpx.get(f"{console.url}/metrics").text
            with console.client() as client:
                timings = list_latencies(client, args.seconds)
                sampler.done.set()
                stopped = generator.stop_agents(args.stop)
                delays = offline_delays(client, stopped, args.stale + 60)
        finally:
            if generator is not None:
                generator.close()
            console.stop()
    ingested = metric(after, INGESTED) - metric(before, INGESTED)
    return {
        "preloaded_s": preloaded,
        "rss": max(s[0] for s in sampler.samples),
        "nats_rss": max(s[1] for s in sampler.samples),
        "idle_p50": statistics.median(quiet) if quiet else 0.0,
        "idle_p99": pct(quiet, 99) if quiet else 0.0,
        "list_p50": statistics.median(timings),
        "list_p99": pct(timings, 99),
        "requests": len(timings),
        "cpu_us": (cpu1 - cpu0) / max(1.0, ingested) * 1e6,
        "ingested_per_s": ingested / args.seconds,
        "lag_p99": p99_from_buckets(after, LAG, since=before),
        "offline": delays,
        "stopped": len(stopped),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000,100000")
    parser.add_argument("--interval", type=float, default=30.0, help="heartbeat period (s)")
    parser.add_argument("--stale", type=float, default=60.0, help="PROXIMA_AGENT_STALE_SECONDS")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window")
    parser.add_argument("--stop", type=int, default=200, help="agents stopped for offline")
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="list pages asked before any heartbeat"
    )
    parser.add_argument(
        "--switch-interval", type=float, default=0.0, help="the Console's GIL switch interval"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"fleet at scale, SQLite, heartbeats every {args.interval:.0f} s, stale after "
        f"{args.stale:.0f} s",
        flush=True,
    )
    for size in sizes:
        r = run_size(size, args)
        off = sorted(r["offline"].values())
        worst = off[-1] if len(off) == r["stopped"] else float("inf")
        print(
            f"{size:>7,} agents (preloaded in {r['preloaded_s']:.0f} s): "
            f"Console RSS max {r['rss'] / MIB:.0f} MiB (goal <= 1024; nats-server "
            f"{r['nats_rss'] / MIB:.0f} MiB); list without heartbeats p50 "
            f"{r['idle_p50'] * 1000:.1f} ms, p99 {r['idle_p99'] * 1000:.1f} ms; with them "
            f"p50 {r['list_p50'] * 1000:.1f} ms, p99 "
            f"{r['list_p99'] * 1000:.1f} ms (goal <= 50 ms, {r['requests']} requests); "
            f"ingest {r['ingested_per_s']:,.0f}/s at {r['cpu_us']:.0f} us CPU each, lag p99 <= "
            f"{r['lag_p99'] * 1000:.0f} ms; offline shown after last heartbeat: "
            f"{len(off)}/{r['stopped']}, median {statistics.median(off) if off else 0:.1f} s, "
            f"max {worst:.1f} s (goal <= 75 s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
