"""Idle host agent: resident memory and CPU over a window (default 5 minutes), twice: the
process that just enrolled, then the same agent restarted on its state file.

    .venv/bin/python -m bench.agent_idle [--seconds 300] [--heartbeat 30s] [--metrics 60s]
    .venv/bin/python -m bench.agent_idle --seconds 20 --env MALLOC_ARENA_MAX=1   # try a knob
    .venv/bin/python -m bench.agent_idle --imports     # what each import adds, no agent run

Goal (docs/performance.md): <= 35 MiB RSS, <= 5 millicores. A real Console and
one real agent process with the chart's default intervals; the agent is measured after it is
enrolled and connected. The enrolling process used to stay ~12 MiB above a restarted one (httpx
and its TLS context stayed resident); the agent now talks HTTP through urllib, so the two should
be within ~1 MiB. Each line also splits the last RSS sample (``/proc/<pid>/smaps_rollup``) into
anonymous memory (Python's objects, the C heaps) and file-backed pages (libpython, the C
extensions' code).

``--imports`` runs a fresh interpreter per line of :data:`IMPORT_STEPS`, importing in the order
``python -m agent run`` does, and prints what each step adds to its RSS.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess

# Cumulative steps: each is imported after all those before it (see --imports).
IMPORT_STEPS = (
    "asyncio",  # and ssl: nats-py, the HTTPS client
    "typer",
    "pydantic",
    "pydantic.main",  # BaseModel: the schema generator
    "pydantic.types",
    "contracts.messages",  # the first models built (pydantic-core's validators)
    "contracts.enrollment",
    "nacl.signing",
    "nats",
    "psutil",
    "agent.settings",
    "agent.cli",
    "agent.runtime",
    "agent.node",
)

_IMPORT_PROBE = """
import importlib, sys
sys.modules.setdefault("aiohttp", None)  # as agent.cli does
def rss():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024
before = rss()
for name in sys.argv[1:]:
    importlib.import_module(name)
print(f"{before:.2f} {rss():.2f}")
"""


def memory_split(pid: int) -> tuple[float, float]:
    """(anonymous MiB, file-backed MiB) of a process's resident memory."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    anonymous = fields.get("Anonymous", 0)
    return anonymous / 1024, (fields.get("Rss", 0) - anonymous) / 1024


def watch(pid: int, seconds: float) -> tuple[float, float, float, float, str]:
    """(rss MiB, peak MiB, millicores, wall seconds, memory split) of ``pid`` over ``seconds``."""
    proc = psutil.Process(pid)
    cpu0 = proc.cpu_times()
    t0 = time.monotonic()
    peak = rss = proc.memory_info().rss
    while time.monotonic() - t0 < seconds:
        time.sleep(min(1.0, seconds / 10))
        rss = proc.memory_info().rss
        peak = max(peak, rss)
    anonymous, files = memory_split(pid)
    cpu1 = proc.cpu_times()
    wall = time.monotonic() - t0
    used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    split = f"{anonymous:.1f} MiB anonymous, {files:.1f} MiB file-backed"
    return rss / 2**20, peak / 2**20, used / wall * 1000, wall, split


def measure(agent: AgentProcess, seconds: float) -> tuple[float, float, float, float, str]:
    """:func:`watch` over a ready agent."""
    agent.wait_ready()
    assert agent.process is not None
    return watch(agent.process.pid, seconds)


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` options → the extra environment of the agent process."""
    return dict(pair.split("=", 1) for pair in pairs)


def print_imports() -> None:
    previous = None
    for n in range(len(IMPORT_STEPS)):
        probe = [sys.executable, "-c", _IMPORT_PROBE, *IMPORT_STEPS[: n + 1]]
        before, after = map(float, subprocess.check_output(probe, text=True).split())
        if previous is None:
            print(f"{'interpreter':<22} {before:6.1f} MiB")
            previous = before
        print(f"{IMPORT_STEPS[n]:<22} {after:6.1f} MiB  (+{after - previous:.1f})")
        previous = after


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--heartbeat", default="30s")
    parser.add_argument("--metrics", default="60s")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the agent")
    parser.add_argument("--imports", action="store_true", help="only the import probe")
    args = parser.parse_args()
    if args.imports:
        print_imports()
        return
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        console = ConsoleProcess(Path(tmp) / "console").start()
        agent = AgentProcess(
            name="idle-host",
            data_dir=Path(tmp) / "agent",
            backend_url=console.url,
            install_token=console.install_token(),
            heartbeat=args.heartbeat,
            env={
                "PROXIMA_METRICS_INTERVAL": args.metrics,
                "PROXIMA_LOG_LEVEL": "info",
                **parse_env(args.env),
            },
        )
        try:
            for phase in ("just enrolled", "restarted"):
                agent.start()
                rss, peak, millicores, wall, split = measure(agent, args.seconds)
                agent.stop()
                lines.append(
                    f"idle host agent, {phase}, over {wall:.0f} s (heartbeat {args.heartbeat}, "
                    f"metrics {args.metrics}): RSS {rss:.1f} MiB ({split}; peak {peak:.1f} MiB; "
                    f"goal <= 35 MiB), CPU {millicores:.2f} millicores (goal <= 5)"
                )
        finally:
            agent.stop()
            console.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
