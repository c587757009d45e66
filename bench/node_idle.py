"""Idle node agent (``k8s-node-monitor``): resident memory and CPU over a window.

    .venv/bin/python -m bench.node_idle [--seconds 60] [--heartbeat 30s] [--metrics 60s]
    .venv/bin/python -m bench.node_idle --seconds 300     # the issue's five minutes

Goal (issue 14): <= 35 MiB RSS (issue 5 asked <= 50 MiB), <= 5 millicores. A real Console, a
fake kubelet over HTTPS (``/stats/summary`` of a node with 110 pods, CA-verified, bearer token)
and one real node agent process with the chart's default intervals, host metrics on (this
machine's /proc and /sys as the host's). The agent is measured once enrolled and connected,
after its first kubelet read.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess
from testkit.k8s import FakeKubelet
from testkit.waiting import wait_for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--heartbeat", default="30s")
    parser.add_argument("--metrics", default="60s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        kubelet = FakeKubelet(root / "kubelet", pods=110).start()
        console = ConsoleProcess(root / "console").start()
        agent = AgentProcess(
            name="bench-node-1",
            data_dir=root / "agent",
            backend_url=console.url,
            install_token=console.install_token(),
            agent_type="k8s-node-monitor",
            heartbeat=args.heartbeat,
            env={
                "PROXIMA_METRICS_INTERVAL": args.metrics,
                "PROXIMA_HOST_METRICS": "true",
                "PROXIMA_HOST_PROC": "/proc",
                "PROXIMA_HOST_SYS": "/sys",
                "PROXIMA_KUBELET_URL": kubelet.url,
                "PROXIMA_KUBELET_CA_FILE": str(kubelet.ca_file),
                "PROXIMA_KUBELET_TOKEN_FILE": str(kubelet.token_file),
                "PROXIMA_CLUSTER_SLUG": "bench",
            },
        )
        try:
            agent.start()
            agent.wait_ready()
            wait_for(lambda: kubelet.requests >= 1, timeout=30, what="a first kubelet read")
            assert agent.process is not None
            proc = psutil.Process(agent.process.pid)
            cpu0 = proc.cpu_times()
            reads0 = kubelet.requests
            t0 = time.monotonic()
            peak = rss = proc.memory_info().rss
            while time.monotonic() - t0 < args.seconds:
                time.sleep(min(1.0, args.seconds / 10))
                rss = proc.memory_info().rss
                peak = max(peak, rss)
            cpu1 = proc.cpu_times()
            wall = time.monotonic() - t0
            used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
            reads = kubelet.requests - reads0
            assert "kubelet metrics not flowing" not in agent.log()
        finally:
            agent.stop()
            console.stop()
            kubelet.stop()
    print(
        f"idle node agent over {wall:.0f} s (heartbeat {args.heartbeat}, metrics {args.metrics}, "
        f"{reads} kubelet reads of a 110-pod node): RSS {rss / 2**20:.1f} MiB (peak "
        f"{peak / 2**20:.1f} MiB; goal <= 35 MiB), CPU {used / wall * 1000:.2f} millicores "
        f"(goal <= 5)"
    )


if __name__ == "__main__":
    main()
