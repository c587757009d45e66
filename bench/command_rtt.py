"""Console -> agent command round trip on loopback: p50 / p99.

    .venv/bin/python -m bench.command_rtt [--count 2000]

Goal (issue 14): <= 300 us p50, <= 2 ms p99. The Console runs in this process (its runtime:
database, embedded nats-server, environment account and link, ingester), so its own send path
is what is timed: ``ConsoleRuntime.send_command`` (a ``Command`` built and serialised, the
agent's environment looked up, published into the environment's account and the legacy one
when present) up to the agent's result arriving in the Console's result handler (after the
environment gate). The agent is a separate process on its own enrolled-style credential (a
user JWT signed by the environment's account with the agent's permissions, its own inbox
prefix) that answers each ``ping`` with a result request, as ``agent.delivery`` does.

Printed: the round trip, and the part of it ``send_command`` itself takes (it returns after a
PING/PONG flush with the server). Not included: the result's database write and its
acknowledgement to the agent (``bench.result_ack`` measures that, a batch commit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nkeys

from contracts import subjects
from contracts.messages import CommandKind


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _seed_agent(data_dir: Path) -> tuple[str, str, str]:
    """A bootstrapped database with one agent record; (agent id, its JWT, its seed)."""
    from sqlalchemy import insert
    from sqlmodel import Session

    from console.bootstrap import bootstrap
    from console.core.db import make_engine, migrate
    from console.models import Agent, new_id
    from console.nats.jwt import agent_jwt
    from console.services.nats_keys import environment_key

    url = f"sqlite:///{data_dir}/console.db"
    data_dir.mkdir(parents=True)
    migrate(url)
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            info = bootstrap(session, client_name="acme", environment_name="prod")
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        public = nkeys.from_seed(bytearray(seed)).public_key.decode()
        agent_id = new_id()
        with engine.begin() as conn:
            conn.execute(
                insert(Agent),
                [
                    {
                        "id": agent_id,
                        "client_id": info.client_id,
                        "environment_id": info.environment_id,
                        "agent_type": "host",
                        "name": "rtt-agent",
                        "nats_public_key": public,
                        "version": "0.8.0",
                        "can_self_update": True,
                        "labels": {},
                        "enrolled_at": datetime.now(UTC),
                        "conflict_count": 0,
                    }
                ],
            )
        jwt = agent_jwt(
            environment_key(engine, info.environment_id), agent_id=agent_id, public_key=public
        )
    finally:
        engine.dispose()
    return agent_id, jwt, seed.decode()


async def _measure(data_dir: Path, agent: tuple[str, str, str], count: int) -> dict[str, Any]:
    from console.core.settings import ConsoleSettings
    from console.runtime import ConsoleRuntime
    from testkit.net import free_port

    settings = ConsoleSettings(data_dir=data_dir, nats_port=free_port())
    rt = ConsoleRuntime(settings)
    arrived: dict[str, asyncio.Future[float]] = {}
    on_result = rt.ingester.on_result

    async def timed(msg: Any) -> None:
        waiter = arrived.get(json.loads(msg.data)["command_id"])
        if waiter is not None and not waiter.done():
            waiter.set_result(time.perf_counter())
        await on_result(msg)

    rt.ingester.on_result = timed  # type: ignore[method-assign]
    await rt.start()
    agent_id, jwt, seed = agent
    responder = subprocess.Popen(
        [sys.executable, "-m", "bench.command_rtt", "--respond", rt.nats_url, agent_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert responder.stdin is not None and responder.stdout is not None
    responder.stdin.write(f"{jwt}\n{seed}\n")
    responder.stdin.flush()
    try:
        await asyncio.to_thread(responder.stdout.readline)  # "ready"
        round_trips, sends = [], []
        loop = asyncio.get_running_loop()
        for i in range(count + 100):
            started = time.perf_counter()
            command_id = f"rtt-{i}"
            arrived[command_id] = loop.create_future()
            await rt.send_commands([(agent_id, command_id)], CommandKind.PING, {})
            sent = time.perf_counter()
            back = await asyncio.wait_for(arrived[command_id], 10)
            del arrived[command_id]
            if i >= 100:  # warm-up
                round_trips.append(back - started)
                sends.append(sent - started)
    finally:
        responder.stdin.close()
        responder.wait(timeout=10)
        await rt.stop()
    return {"round_trips": round_trips, "sends": sends}


async def _respond(nats_url: str, agent_id: str) -> None:
    import nats

    jwt, seed = sys.stdin.readline().strip(), sys.stdin.readline().strip()
    nc = await nats.connect(
        nats_url,
        nkeys_seed_str=seed,
        user_jwt_cb=lambda: jwt.encode(),
        inbox_prefix=subjects.agent_inbox_prefix(agent_id),
    )
    result_subject = subjects.command_result(agent_id)
    pending: set[asyncio.Future[Any]] = set()

    async def on_command(msg: Any) -> None:
        cmd = json.loads(msg.data)
        body = json.dumps(
            {
                "command_id": cmd["command_id"],
                "agent_id": agent_id,
                "kind": cmd["kind"],
                "status": "succeeded",
                "finished_at": datetime.now(UTC).isoformat(),
            }
        ).encode()
        # a request, as the agent sends it: the acknowledgement comes after a commit, later
        reply = asyncio.ensure_future(nc.request(result_subject, body, timeout=10))
        pending.add(reply)
        reply.add_done_callback(pending.discard)

    await nc.subscribe(subjects.commands(agent_id), cb=on_command)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the benchmark closes it
    await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument(
        "--respond", nargs=2, metavar=("NATS_URL", "AGENT_ID"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.respond:
        asyncio.run(_respond(*args.respond))
        return
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "console"
        agent = _seed_agent(data_dir)
        r = asyncio.run(_measure(data_dir, agent, args.count))
    rt, sends = [x * 1e6 for x in r["round_trips"]], [x * 1e6 for x in r["sends"]]
    met = statistics.median(rt) <= 300 and pct(rt, 99) <= 2000
    print(
        f"command round trip (Console send -> agent -> result in the Console), loopback, "
        f"{len(rt)} sequential: p50 {statistics.median(rt):.0f} us (goal <= 300 us), p99 "
        f"{pct(rt, 99):.0f} us (goal <= 2,000 us); {'met' if met else 'NOT met'}\n"
        f"  of which send_command (publish + flush to the server): p50 "
        f"{statistics.median(sends):.0f} us, p99 {pct(sends, 99):.0f} us"
    )


if __name__ == "__main__":
    main()
