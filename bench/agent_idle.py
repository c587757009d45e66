"""Idle host agent: resident memory and CPU over a window (default 5 minutes).

    .venv/bin/python -m bench.agent_idle [--seconds 300] [--heartbeat 30s] [--metrics 60s]

Goal (issue 2): <= 50 MiB RSS, <= 5 millicores. A real Console and one real agent process with
the chart's default intervals; the agent is measured after it is enrolled and connected.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from tests.support.agents import AgentProcess
from tests.support.console import ConsoleProcess


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--heartbeat", default="30s")
    parser.add_argument("--metrics", default="60s")
    args = parser.parse_args()
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
            agent.start()
            agent.wait_ready()
            assert agent.proc is not None
            proc = psutil.Process(agent.proc.pid)
            cpu0 = proc.cpu_times()
            t0 = time.monotonic()
            peak = rss = proc.memory_info().rss
            while time.monotonic() - t0 < args.seconds:
                time.sleep(min(1.0, args.seconds / 10))
                rss = proc.memory_info().rss
                peak = max(peak, rss)
            cpu1 = proc.cpu_times()
            wall = time.monotonic() - t0
            used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        finally:
            agent.stop()
            console.stop()
    print(
        f"idle host agent over {wall:.0f} s (heartbeat {args.heartbeat}, metrics {args.metrics}): "
        f"RSS {rss / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB; goal <= 50 MiB), "
        f"CPU {used / wall * 1000:.2f} millicores (goal <= 5)"
    )


if __name__ == "__main__":
    main()
