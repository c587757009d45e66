"""Idle node agent (``k8s-node-monitor``): resident memory and CPU over a window.

    .venv/bin/python -m bench.node_idle [--seconds 60] [--heartbeat 30s] [--metrics 60s]
    .venv/bin/python -m bench.node_idle --seconds 300     # five minutes
    .venv/bin/python -m bench.node_idle --env MALLOC_ARENA_MAX=1   # try a knob

Goal (docs/performance.md): <= 35 MiB RSS, <= 5 millicores. A real Console, a
fake kubelet over HTTPS (``/stats/summary`` of a node with 110 pods, CA-verified, bearer token)
and one real node agent process with the chart's default intervals, host metrics on (this
machine's /proc and /sys as the host's). The agent is measured once enrolled and connected,
after its first kubelet read. The line splits the last RSS sample as ``bench.agent_idle`` does.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.agent_idle import parse_env, watch
from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess
from testkit.k8s import FakeKubelet
from testkit.waiting import wait_for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--heartbeat", default="30s")
    parser.add_argument("--metrics", default="60s")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the agent")
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
                **parse_env(args.env),
            },
        )
        try:
            agent.start()
            agent.wait_ready()
            wait_for(lambda: kubelet.requests >= 1, timeout=30, what="a first kubelet read")
            assert agent.process is not None
            reads0 = kubelet.requests
            rss, peak, millicores, wall, split = watch(agent.process.pid, args.seconds)
            reads = kubelet.requests - reads0
            assert "kubelet metrics not flowing" not in agent.log()
        finally:
            agent.stop()
            console.stop()
            kubelet.stop()
    print(
        f"idle node agent over {wall:.0f} s (heartbeat {args.heartbeat}, metrics {args.metrics}, "
        f"{reads} kubelet reads of a 110-pod node): RSS {rss:.1f} MiB ({split}; peak "
        f"{peak:.1f} MiB; goal <= 35 MiB), CPU {millicores:.2f} millicores (goal <= 5)"
    )


if __name__ == "__main__":
    main()
