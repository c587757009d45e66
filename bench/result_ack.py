"""The round-trip cost of an acknowledged command result against the old fire-and-forget one.

    .venv/bin/python -m bench.result_ack [--count 200]

One enrolled identity, one dispatched self_update target. Sequentially, ``--count`` times each:

- ``publish+flush``: the old way (``publish_confirmed``): publish, then a PING/PONG round trip
  with the server — "the server has it", not "the Console committed it";
- ``request/ack``: the new way: a request on the result subject, answered in the agent's own
  inbox once the Console's batch has committed (the first is recorded, the rest duplicates:
  each one still goes through the ingest batch, a write transaction and the reply).

Prints p50/p99 per way, in milliseconds, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nats

from contracts import subjects
from testkit.console import ConsoleProcess, Identity
from testkit.rollouts import create_rollout


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3),
    }


async def measure(console: ConsoleProcess, ident: Identity, agent_id: str, count: int) -> dict:
    rollout = create_rollout(console, "bench", waves={"canary_size": 1, "percentages": [100]})
    with console.client() as c:
        c.post(f"/api/v1/fleet/rollouts/{rollout['id']}/start", json={}).raise_for_status()
        c.post(f"/api/v1/fleet/rollouts/{rollout['id']}/waves/0/dispatch").raise_for_status()
        target = c.get(f"/api/v1/fleet/rollouts/{rollout['id']}").json()["targets"][0]
    result = {
        "command_id": target["command_id"],
        "agent_id": agent_id,
        "kind": "self_update",
        "status": "succeeded",
        "finished_at": datetime.now(UTC).isoformat(),
        "detail": {"new_version": "0.9.0"},
    }
    payload = json.dumps(result).encode()
    nc = await nats.connect(
        console.nats_url, **ident.nats_options(), inbox_prefix=subjects.agent_inbox_prefix(agent_id)
    )
    subject = subjects.command_result(agent_id)
    old: list[float] = []
    new: list[float] = []
    outcomes: set[str] = set()
    try:
        for _ in range(count):
            started = time.perf_counter()
            reply = await nc.request(subject, payload, timeout=10)
            new.append(time.perf_counter() - started)
            outcomes.add(json.loads(reply.data)["outcome"])
            started = time.perf_counter()
            await nc.publish(subjects.metrics(agent_id), b"{}")  # dropped as invalid: no write
            await nc.flush()
            old.append(time.perf_counter() - started)
    finally:
        await nc.close()
    return {
        "count": count,
        "publish+flush": _percentiles(old),
        "request/ack": _percentiles(new),
        "outcomes": sorted(outcomes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        console = ConsoleProcess(Path(tmp) / "console").start()
        try:
            ident = Identity(name="bench-1")
            answer = ident.enroll(console, console.install_token())
            answer.raise_for_status()
            agent_id = answer.json()["agent_id"]
            report = asyncio.run(measure(console, ident, agent_id, args.count))
        finally:
            console.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
