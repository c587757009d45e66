"""Idle host agent: resident memory and CPU over a window (default 5 minutes), twice: the
process that just enrolled, then the same agent restarted on its state file.

    .venv/bin/python -m bench.agent_idle [--seconds 300] [--heartbeat 30s] [--metrics 60s]

Goal (issue 14): <= 35 MiB RSS (issue 2 asked <= 50 MiB), <= 5 millicores. A real Console and
one real agent process with the chart's default intervals; the agent is measured after it is
enrolled and connected. The enrolling process used to stay ~12 MiB above a restarted one (httpx
and its TLS context stayed resident); the agent now talks HTTP through urllib, so the two should
be within ~1 MiB.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess


def measure(agent: AgentProcess, seconds: float) -> tuple[float, float, float, float]:
    """(rss MiB, peak MiB, millicores, wall seconds) of a ready agent over ``seconds``."""
    agent.wait_ready()
    assert agent.process is not None
    proc = psutil.Process(agent.process.pid)
    cpu0 = proc.cpu_times()
    t0 = time.monotonic()
    peak = rss = proc.memory_info().rss
    while time.monotonic() - t0 < seconds:
        time.sleep(min(1.0, seconds / 10))
        rss = proc.memory_info().rss
        peak = max(peak, rss)
    cpu1 = proc.cpu_times()
    wall = time.monotonic() - t0
    used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return rss / 2**20, peak / 2**20, used / wall * 1000, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--heartbeat", default="30s")
    parser.add_argument("--metrics", default="60s")
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        console = ConsoleProcess(Path(tmp) / "console").start()
        agent = AgentProcess(
            name="idle-host",
            data_dir=Path(tmp) / "agent",
            backend_url=console.url,
            install_token=console.install_token(),
            heartbeat=args.heartbeat,
            env={"PROXIMA_METRICS_INTERVAL": args.metrics, "PROXIMA_LOG_LEVEL": "info"},
        )
        try:
            for phase in ("just enrolled", "restarted"):
                agent.start()
                rss, peak, millicores, wall = measure(agent, args.seconds)
                agent.stop()
                lines.append(
                    f"idle host agent, {phase}, over {wall:.0f} s (heartbeat {args.heartbeat}, "
                    f"metrics {args.metrics}): RSS {rss:.1f} MiB (peak {peak:.1f} MiB; goal <= "
                    f"35 MiB), CPU {millicores:.2f} millicores (goal <= 5)"
                )
        finally:
            agent.stop()
            console.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
