"""Cluster inventory of a 5,000-pod fleet: relist time and peak RSS of the collector.

    .venv/bin/python -m bench.cluster_inventory [--pods 5000] [--syncs 5] [--interval 3s]

Goal: a relist in <= 3 s, the collector's peak RSS <= 256 MiB. A real Console, the
Kubernetes API double preloaded with a deterministic fleet (in this process), and one real
``k8s-cluster-collector`` agent process (replicas 1, podLimit = the fleet's pods) syncing every
``--interval``. Relist time is what the agent reports for each sync (every list call,
paginated, plus the summaries); the end-to-end time also counts gzip, chunking under the
Console's NATS max payload, publishing and the Console storing the snapshot. Peak RSS is the
process's high-water mark (``VmHWM``) after the syncs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess
from testkit.kube import FleetSpec, KubeApiDouble, objects, preload_fleet
from testkit.waiting import wait_for

RELIST = re.compile(r"published: .*relist ([0-9.]+)s \((\d+) requests\)")


def _vm(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--interval", default="3s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, KubeApiDouble() as kube:
        root = Path(tmp)
        fleet = preload_fleet(kube, FleetSpec(pods=args.pods))
        kube.put(objects.namespace("proxima-system"))
        kubeconfig = kube.write_kubeconfig(root / "kubeconfig")
        console = ConsoleProcess(root / "console").start()
        with console.client() as c:
            c.post("/api/v1/clusters", json={"name": "bench"}).raise_for_status()
        agent = AgentProcess(
            name="bench-cluster-agent-0",
            data_dir=root / "agent",
            backend_url=console.url,
            install_token=console.install_token(cluster_slug="bench"),
            agent_type="k8s-cluster-collector",
            heartbeat="30s",
            env={
                **kube.subprocess_env(kubeconfig),
                "PROXIMA_CLUSTER_NAME": "bench",
                "PROXIMA_POD_LIMIT": str(args.pods),
                "PROXIMA_SYNC_INTERVAL": args.interval,
                "PROXIMA_POD_NAMESPACE": "proxima-system",
            },
        )
        try:
            started = time.monotonic()
            agent.start()
            wait_for(lambda: len(RELIST.findall(agent.log())) >= 1, timeout=120, what="a sync")
            first = time.monotonic() - started
            with httpx.Client(
                base_url=console.url, headers={"Authorization": f"Bearer {console.token}"}
            ) as c:
                stored = wait_for(
                    lambda: c.get("/api/v1/clusters/bench").json()["last_inventory_at"],
                    timeout=60,
                    what="the inventory stored",
                )
                counts = c.get("/api/v1/clusters/bench").json()["counts"]
            wait_for(
                lambda: len(RELIST.findall(agent.log())) >= args.syncs,
                timeout=300,
                what=f"{args.syncs} syncs",
            )
            assert agent.process is not None
            peak = _vm(agent.process.pid, "VmHWM")
            rss = _vm(agent.process.pid, "VmRSS")
            relists = [(float(s), int(n)) for s, n in RELIST.findall(agent.log())]
        finally:
            agent.stop()
            console.stop()
    seconds = [s for s, _n in relists]
    print(
        f"cluster inventory of {fleet.counts['Pod']} pods ({counts['pods']} reported, "
        f"{sum(counts.values())} objects of {len(counts)} kinds, {relists[0][1]} paginated list "
        f"calls per relist):\n"
        f"  relist over {len(seconds)} syncs: median {statistics.median(seconds):.2f} s, "
        f"max {max(seconds):.2f} s (goal <= 3 s)\n"
        f"  collector peak RSS {peak:.1f} MiB (goal <= 256 MiB), RSS now {rss:.1f} MiB\n"
        f"  agent start to first inventory published {first:.1f} s (stored at {stored})"
    )


if __name__ == "__main__":
    main()
