"""Rollout orchestration at fleet scale, and how fast a crossing result halts a rollout.

    .venv/bin/python -m bench.rollout [--agents 20000] [--per-connection 100]
    .venv/bin/python -m bench.rollout --agents 20000 --profile rollout.prof   # Console profile

Goals: 20,000 agents notified and results recorded across 5 waves in <= 30 s of
orchestration time; halt latency from the crossing result to the stall <= 1 s with 0
later-wave sends; <= 50 Prefect task runs per rollout.

The agents are a swarm answering self_update commands (testkit/swarm.py). With
``--per-connection 1`` each is a real enrolled identity on its own NATS session with its own
nkey; above that, ``per-connection`` agents share one session (the module docstring of
testkit/swarm.py says what that does not exercise) and their records are written into the
database (``--no-preload``: each enrolls over HTTP instead, 2-3 minutes per 2,000 on this loaded
machine). The flow runs under Prefect's test harness against a real Console on SQLite.
``--profile`` runs the Console under cProfile (bench.profiled_console; slower: read its figures
as shares).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pstats
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from testkit.console import ConsoleProcess
from testkit.rollouts import ARTIFACT, create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for


async def _task_run_count(flow_run_id: str) -> int:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
        return len(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=20000)
    parser.add_argument(
        "--per-connection", type=int, default=100, help="agents per NATS session (1: each its own)"
    )
    parser.add_argument("--enroll-concurrency", type=int, default=16)
    parser.add_argument(
        "--heartbeat", type=float, default=60.0, help="seconds between each agent's heartbeats"
    )
    parser.add_argument(
        "--preload",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the agent records into the database instead of enrolling each over HTTP "
        "(needs --per-connection > 1)",
    )
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats here")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from flows.rollout import fleet_rollout

    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=180):
        env = {
            "PROXIMA_AGENT_STALE_SECONDS": "600",
            "PROXIMA_HEARTBEAT_FLUSH_SECONDS": "0.5",
            "PROXIMA_PREFECT_API_URL": str(PREFECT_API_URL.value()),
            # The swarm enrolls 20,000 from one address with one token: not what is measured.
            "PROXIMA_ENROLL_RATE_PER_SOURCE": "1000000/minute",
            "PROXIMA_ENROLL_RATE_PER_TOKEN": "1000000/minute",
        }
        command = None
        if args.profile:
            command = [sys.executable, "-m", "bench.profiled_console"]
            env["PROXIMA_PROFILE_OUT"] = str(args.profile.resolve())
        console = ConsoleProcess(Path(tmp) / "console", env=env, command=command).start(
            timeout=300 if args.profile else 30
        )
        os.environ["PROXIMA_CONSOLE_URL"] = console.url
        os.environ["PROXIMA_CONSOLE_TOKEN"] = console.token
        t0 = time.perf_counter()
        swarm = Swarm(
            console,
            args.agents,
            heartbeat_seconds=args.heartbeat,
            # The agent's own defaults (PROXIMA_RESULT_ACK_TIMEOUT / _RESULT_RETRY_MAX): the
            # swarm's test defaults (2 s / 2 s) re-send every result a loaded Console has not
            # acknowledged within 2 s, and the repeats then load it further.
            ack_timeout=5.0,
            retry_max=30.0,
            per_connection=args.per_connection,
            enroll_concurrency=args.enroll_concurrency,
            preloaded=args.preload and args.per_connection > 1,
        )
        try:
            swarm.start()
        except BaseException:
            console.stop()  # a swarm that could not start must not leave the Console running
            raise
        setup = time.perf_counter() - t0
        try:
            canary = max(1, args.agents // 100)
            r = create_rollout(
                console,
                name="bench",
                timeout=600,
                waves={"canary_size": canary, "percentages": [5, 25, 50, 100]},
            )
            cpu0 = _cpu(console)
            started = time.perf_counter()
            result = fleet_rollout(rollout_id=str(r["id"]), poll_seconds=0.25)
            orchestration = time.perf_counter() - started
            cpu = {k: v - cpu0[k] for k, v in _cpu(console).items()}
            with console.client() as c:
                final = c.get(
                    f"/api/v1/fleet/rollouts/{r['id']}", params={"targets": "false"}
                ).json()
            tasks = asyncio.run(_task_run_count(final["flow_run_id"]))
            notified = sum(1 for v in swarm.received_by().values() if v)
            sent = swarm.deliveries()
            repeats = sum(d.attempts for d in sent) - len(sent)
            print(
                f"rollout: {args.agents} agents across {len(final['waves'])} waves "
                f"({[w['size'] for w in final['waves']]}) -> {result['state']}, "
                f"{final['counts']['succeeded']} results recorded, {notified} notified, "
                f"in {orchestration:.1f} s of orchestration (goal <= 30 s); "
                f"{tasks} Prefect task runs (goal <= 50); "
                f"setup ({'preload' if swarm.preloaded else 'enroll'} + connect) {setup:.1f} s; "
                f"{args.per_connection} agents per NATS session, {len(swarm.sessions)} sessions, "
                f"heartbeats every {args.heartbeat:g} s; {repeats} results sent again "
                "(not acknowledged in time)"
            )
            print(
                "CPU seconds during the rollout: "
                + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
                + f" (load average {os.getloadavg()[0]:.1f})"
            )
            halt(console, swarm)
        finally:
            swarm.stop()
            console.stop()
    if args.profile:
        out = io.StringIO()
        for order in ("tottime", "cumulative"):
            pstats.Stats(str(args.profile), stream=out).sort_stats(order).print_stats(args.top)
        print(out.getvalue())


def _cpu(console: ConsoleProcess) -> dict[str, float]:
    """CPU seconds so far of the Console, its nats-server, and this process (swarm + flow)."""
    import psutil

    assert console.process is not None
    parent = psutil.Process(console.process.pid)
    times = {"console": parent.cpu_times(), "nats-server": None}
    for child in parent.children(recursive=True):
        if "nats" in child.name():
            times["nats-server"] = child.cpu_times()
    own = psutil.Process().cpu_times()
    out = {k: (t.user + t.system) if t else 0.0 for k, t in times.items()}
    out["bench (swarm + flow)"] = own.user + own.system
    return out


def halt(console: ConsoleProcess, swarm: Swarm) -> None:
    """Every agent fails; the first failure crosses a count-1 criterion. Measure the time from
    that result being sent to the stall being committed, and sends to later waves."""
    sent_at: list[float] = []

    def fail(_name: str, _cmd: dict[str, object]) -> tuple[str, str | None, str | None]:
        sent_at.append(time.time())
        return "failed", "backup current binary: rename …: read-only file system", None

    swarm.behaviour = fail
    for agent in swarm.agents:
        agent.version = "0.8.0"
    before = swarm.received_by()
    r = create_rollout(
        console,
        name="halt",
        timeout=600,
        artifact={**ARTIFACT, "version": "0.9.1"},
        waves={"canary_size": 100, "percentages": [50, 100]},
        criteria=[{"failure_type": "failed", "threshold_count": 1, "min_executed": 1}],
    )
    with console.client() as c:
        c.post(f"/api/v1/fleet/rollouts/{r['id']}/start", json={}).raise_for_status()
        c.post(f"/api/v1/fleet/rollouts/{r['id']}/waves/0/dispatch").raise_for_status()
        wait_for(
            lambda: (
                c.get(f"/api/v1/fleet/rollouts/{r['id']}", params={"targets": "false"}).json()[
                    "state"
                ]
                == "stalled"
            ),
            120,
            "the stall",
            interval=0.01,
        )
        refused = c.post(f"/api/v1/fleet/rollouts/{r['id']}/waves/1/dispatch").json()
        final = c.get(f"/api/v1/fleet/rollouts/{r['id']}").json()
    first = min(sent_at) if sent_at else float("nan")
    later = [t["agent_name"] for t in final["targets"] if t["wave"] > 0]
    after = swarm.received_by()
    later_sends = sum(after[n] - before[n] for n in later)
    latency = _stall_latency(console, final["id"], first)
    print(
        f"halt: state {final['state']} after the first failing result; latency "
        f"{latency * 1000:.0f} ms from that result to the committed stall (goal <= 1 s); "
        f"{later_sends} sends to later waves (goal 0); dispatch then answered "
        f"{refused['refused']!r}"
    )


def _stall_latency(console: ConsoleProcess, rollout_id: str, first_sent: float) -> float:
    import sqlalchemy as sa

    from console.core.db import make_engine
    from console.core.settings import ConsoleSettings

    url = ConsoleSettings(data_dir=console.data_dir).resolved_database_url()
    engine = make_engine(url)
    with engine.connect() as conn:
        stalled = conn.execute(
            sa.text("SELECT stalled_at FROM rollout WHERE id = :i"), {"i": rollout_id}
        ).scalar_one()
    engine.dispose()
    if isinstance(stalled, str):
        stalled = datetime.fromisoformat(stalled)
    if stalled.tzinfo is None:
        stalled = stalled.replace(tzinfo=UTC)
    return float(stalled.timestamp() - first_sent)


if __name__ == "__main__":
    main()
