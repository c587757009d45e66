"""What one NATS account per environment costs a Console: start time with N environments, and
a revocation's push → disconnect latency.

    .venv/bin/python -m bench.nats_accounts [--environments 100] [--revocations 10]

A real Console (embedded nats-server): N environments are bootstrapped in the database before
it starts; the Console creates N account keys, pushes N account JWTs and opens N connections
(its log says how long). Then, for each of ``--revocations`` agents connected in its own
environment, the time from ``POST …/revoke`` to its connection being closed by the server.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from pathlib import Path

import nats

from testkit.console import ConsoleProcess, Identity


async def _revocations(console: ConsoleProcess, count: int) -> list[float]:
    token = console.install_token()
    latencies = []
    for i in range(count):
        ident = Identity(name=f"bench-{i}", machine_id=f"m-bench-{i}")
        agent_id = ident.enroll(console, token).json()["agent_id"]
        closed = asyncio.Event()

        async def on_closed(event: asyncio.Event = closed) -> None:
            event.set()

        nc = await nats.connect(
            console.nats_url, **ident.nats_options(), allow_reconnect=False, closed_cb=on_closed
        )
        with console.client() as c:
            started = time.perf_counter()
            c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").raise_for_status()
            await asyncio.wait_for(closed.wait(), 10)
            latencies.append(time.perf_counter() - started)
        await nc.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--environments", type=int, default=100)
    parser.add_argument("--revocations", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        console = ConsoleProcess(Path(tmp) / "console")
        info = console.bootstrap()
        for i in range(1, args.environments):
            console.bootstrap(client="bench", environment=f"env-{i}")
        console.token, console.bootstrap_info = info["token"], info
        started = time.perf_counter()
        console.start(timeout=300)
        up = time.perf_counter() - started
        try:
            log = console.log_path.read_text()
            linked = re.search(r"(\d+) environment account\(s\) linked in (.*)", log)
            latencies = asyncio.run(_revocations(console, args.revocations))
        finally:
            console.stop()
    print(f"environments: {args.environments}; Console up (healthz) in {up:.2f} s")
    if linked:
        print(f"  accounts created, pushed and linked at start: {linked[1]} in {linked[2]}")
    ms = sorted(1000 * x for x in latencies)
    print(
        f"revoke → connection closed: median {statistics.median(ms):.0f} ms, "
        f"max {ms[-1]:.0f} ms over {len(ms)}"
    )


if __name__ == "__main__":
    main()
