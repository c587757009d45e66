"""Console -> agent command round trip on loopback: p50 / p99, and CPU per command.

    .venv/bin/python -m bench.command_rtt [--count 1000] [--deadline 300]

Goal (docs/performance.md): <= 300 us p50, <= 2 ms p99. Both ends are the product's own code:

- The Console runs in this process (``ConsoleRuntime``: database, embedded nats-server,
  environment account and link, ingester). Timed from ``ConsoleRuntime.send_command`` (a
  ``Command`` built and serialised, the agent's environment looked up, published into the
  environment's account, and the legacy one when present) to the result arriving in the
  Console's result handler (``Ingester.on_result``, after the environment gate).
- The agent is a separate process running the agent's command path: ``NatsSession`` (its own
  user JWT signed by the environment's account, its own inbox prefix), ``CommandDispatcher``
  with the agent's ``ping`` handler, ``CommandLedger`` in a data directory, and
  ``ResultDelivery`` (the result is a request answered after the Console's commit).

Each command is sent once the previous one's acknowledgement has left the Console, so every
round trip starts from an idle agent. Included: the agent's two ledger changes before the result
goes out (each a line appended to the ledger's journal and ``fdatasync``-ed; every command
kind, ``ping`` too: at most once across restarts, result kept until acknowledged);
``--ledger memory`` skips them in the agent process to show the rest. Not included: the
result's database write and its acknowledgement (``bench.result_ack`` measures that: a batch
commit), and the ledger's third change once acknowledged (after the round trip).

Every wait has a timeout, and a watchdog thread ends the run (thread stacks printed, child
processes killed) if the whole run passes ``--deadline`` seconds: it never hangs silently.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nkeys

from bench.fleet_load import pid_cpu_seconds
from contracts.messages import CommandKind

WARMUP = 100


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _preload_agent(data_dir: Path) -> dict[str, str]:
    """A bootstrapped database with one agent record; the agent's identity."""
    from sqlalchemy import insert
    from sqlmodel import Session

    from console.bootstrap import bootstrap
    from console.core.db import make_engine, migrate
    from console.models import Agent, new_id
    from console.nats.jwt import agent_jwt
    from console.services.nats_keys import environment_key
    from testkit.preload import agent_row

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
                    agent_row(
                        agent_id=agent_id,
                        client_id=info.client_id,
                        environment_id=info.environment_id,
                        name="rtt-agent",
                        public_key=public,
                        enrolled_at=datetime.now(UTC),
                    )
                ],
            )
        jwt = agent_jwt(
            environment_key(engine, info.environment_id), agent_id=agent_id, public_key=public
        )
    finally:
        engine.dispose()
    return {
        "agent_id": agent_id,
        "jwt": jwt,
        "seed": seed.decode(),
        "client_id": info.client_id,
        "environment_id": info.environment_id,
    }


class _Timed:
    """Wraps the Console's result handler and ack: when each command's result arrived, and
    when its acknowledgement was sent back."""

    def __init__(self, rt: Any) -> None:
        self.arrived: dict[str, asyncio.Future[float]] = {}
        self.acked: dict[str, asyncio.Future[None]] = {}
        ingester = rt.ingester
        on_result, answer = ingester.on_result, ingester._answer

        async def timed(msg: Any) -> None:
            now = time.perf_counter()
            await on_result(msg)
            for _agent, result, m in ingester._results[-1:]:
                if m is msg:
                    _settle(self.arrived.get(result.command_id), now)

        async def answered(results: list[Any], acks: list[Any]) -> None:
            await answer(results, acks)
            for ack in acks:
                _settle(self.acked.get(ack.command_id), None)

        ingester.on_result = timed
        ingester._answer = answered

    def expect(self, command_id: str) -> tuple[asyncio.Future[float], asyncio.Future[None]]:
        loop = asyncio.get_running_loop()
        self.arrived[command_id] = loop.create_future()
        self.acked[command_id] = loop.create_future()
        return self.arrived[command_id], self.acked[command_id]


def _settle(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


async def _measure(data_dir: Path, agent: dict[str, str], args: argparse.Namespace) -> Any:
    from console.core.settings import ConsoleSettings
    from console.runtime import ConsoleRuntime
    from testkit.net import free_port

    rt = ConsoleRuntime(ConsoleSettings(data_dir=data_dir, nats_port=free_port()))
    timed = _Timed(rt)
    await asyncio.wait_for(rt.start(), 60)
    responder = None
    try:
        responder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.command_rtt",
            "--respond",
            rt.nats_url,
            str(data_dir.parent / "agent"),
            "--ledger",
            args.ledger,
            *(["--profile", str(args.profile)] if args.profile else []),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        _CHILDREN.append(responder.pid)
        assert responder.stdin is not None and responder.stdout is not None
        responder.stdin.write(("\n".join(agent[k] for k in _IDENTITY) + "\n").encode())
        await asyncio.wait_for(responder.stdin.drain(), 10)
        line = await asyncio.wait_for(responder.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"the agent process did not start: {line!r}")
        if not args.profile:
            return await _loop(rt, timed, agent["agent_id"], responder.pid, args.count)
        import cProfile

        with cProfile.Profile() as profile:
            measured = await _loop(rt, timed, agent["agent_id"], responder.pid, args.count)
        profile.dump_stats(args.profile / "console.prof")
        return measured
    finally:
        if responder is not None:
            await _end(responder)
        await asyncio.wait_for(rt.stop(), 30)


_IDENTITY = ("agent_id", "jwt", "seed", "client_id", "environment_id")


async def _loop(rt: Any, timed: _Timed, agent_id: str, agent_pid: int, count: int) -> Any:
    round_trips, sends = [], []
    embedded = rt.fleet_nats.embedded
    nats_pid = embedded.process.pid if embedded and embedded.process else None
    cpu: dict[str, float] = {}
    if rt.fleet_nats.links.get(None) is not None:
        print("a legacy account is linked: each command is published twice", file=sys.stderr)
    for i in range(count + WARMUP):
        if i == WARMUP:
            cpu = _cpu(agent_pid, nats_pid)
        command_id = f"rtt-{i:06d}"
        arrived, acked = timed.expect(command_id)
        async with asyncio.timeout(5):  # no task of its own (``wait_for`` makes one)
            started = time.perf_counter()
            await rt.send_commands([(agent_id, command_id)], CommandKind.PING, {})
            sent = time.perf_counter()
            back = await arrived
            await acked  # the agent is idle again
        del timed.arrived[command_id], timed.acked[command_id]
        if i >= WARMUP:
            round_trips.append(back - started)
            sends.append(sent - started)
    after = _cpu(agent_pid, nats_pid)
    spent = {k: (after[k] - cpu[k]) / count for k in after}
    return round_trips, sends, spent


def _cpu(agent_pid: int, nats_pid: int | None) -> dict[str, float]:
    return {
        "console": pid_cpu_seconds(os.getpid()),
        "agent": pid_cpu_seconds(agent_pid),
        "nats-server": pid_cpu_seconds(nats_pid) if nats_pid else 0.0,
    }


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 15)
    except TimeoutError:
        print("the agent process did not stop in 15 s: killed", file=sys.stderr)
        proc.kill()
        await asyncio.wait_for(proc.wait(), 5)


# --- the agent process -------------------------------------------------------------------


async def _respond(nats_url: str, data_dir: Path, durable: bool) -> None:
    """The agent's command path on an enrolled-style identity: session, dispatcher, ledger,
    delivery, the ``ping`` handler."""
    from agent.commands import CommandDispatcher, ping_handler
    from agent.delivery import ResultDelivery
    from agent.health import Readiness
    from agent.ledger import CommandLedger
    from agent.session import NatsSession, ReconnectPolicy
    from agent.state import AgentState, StateStore
    from contracts.backoff import Backoff
    from contracts.vocabulary import AgentType

    agent_id, jwt, seed, client_id, environment_id = (
        sys.stdin.readline().strip() for _ in _IDENTITY
    )
    data_dir.mkdir(parents=True)
    store = StateStore(data_dir)
    store.create(
        AgentState(
            agent_id=agent_id,
            agent_type=AgentType.HOST,
            name="rtt-agent",
            seed=seed,  # type: ignore[arg-type]
            nats_url=nats_url,
            nats_jwt=jwt,
            backend_url="http://127.0.0.1:9",
            client_id=client_id,
            environment_id=environment_id,
            enrolled_at=datetime.now(UTC),
        )
    )
    ledger = CommandLedger(data_dir, agent_id)
    ledger.load()
    if not durable:  # --ledger memory: the same entries, never written (splits the figure)
        ledger._record = lambda entry: None  # type: ignore[method-assign]
    started = time.monotonic()
    dispatcher: CommandDispatcher | None = None

    def on_message(subject: str, payload: bytes) -> None:
        assert dispatcher is not None
        dispatcher.submit(subject, payload)

    session = NatsSession(store, Readiness(), policy=ReconnectPolicy(), on_message=on_message)
    delivery = ResultDelivery(session, ledger, backoff=Backoff(initial=0.5, maximum=5.0))
    ping = ping_handler(lambda: {"uptime_seconds": round(time.monotonic() - started, 3)})
    dispatcher = CommandDispatcher(session, ledger, {CommandKind.PING: ping}, delivery)
    tasks = [
        asyncio.create_task(session.run()),
        asyncio.create_task(dispatcher.run()),
        asyncio.create_task(delivery.run()),
    ]
    await asyncio.wait_for(session.wait_connected(), 30)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    closed = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), lambda: closed.done() or closed.set_result(None))
    await closed  # the benchmark closed our stdin (or died): stop
    loop.remove_reader(sys.stdin.fileno())
    await session.stop()
    for task in tasks[1:]:
        task.cancel()
    await asyncio.wait(tasks, timeout=10)


# --- main --------------------------------------------------------------------------------

_CHILDREN: list[int] = []


def _watchdog(seconds: float) -> threading.Timer:
    """Past the deadline: print every thread's stack, kill the children, exit 2."""

    def fire() -> None:
        print(f"\ncommand_rtt: no result after {seconds:.0f} s; stacks:", file=sys.stderr)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for pid in [*_CHILDREN, *_grandchildren()]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(2)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def _grandchildren() -> list[int]:
    path = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    with contextlib.suppress(OSError):
        return [int(p) for p in path.read_text().split()]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds for the run")
    parser.add_argument(
        "--ledger",
        choices=("durable", "memory"),
        default="durable",
        help="durable: the agent's ledger as it is (written and fsync'd before the command runs "
        "and before its result goes out); memory: those writes skipped, to split the figure",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="write cProfile stats of both ends: DIR/console.prof (the timed loop) and "
        "DIR/agent.prof (the agent process, start to stop); read with python -m pstats",
    )
    parser.add_argument("--respond", nargs=2, metavar=("NATS_URL", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.respond:
        _watchdog(args.deadline + 60)
        respond = _respond(args.respond[0], Path(args.respond[1]), args.ledger == "durable")
        if not args.profile:
            asyncio.run(respond)
            return
        import cProfile

        with cProfile.Profile() as profile:
            asyncio.run(respond)
        profile.dump_stats(args.profile / "agent.prof")
        return
    timer = _watchdog(args.deadline)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "console"
        agent = _preload_agent(data_dir)
        rts, sends, cpu = asyncio.run(_measure(data_dir, agent, args))
    timer.cancel()
    rt, sent = [x * 1e6 for x in rts], [x * 1e6 for x in sends]
    p50, p99 = statistics.median(rt), pct(rt, 99)
    met = p50 <= 300 and p99 <= 2000
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"command round trip (Console send -> agent -> result in the Console), loopback, "
        f"{len(rt)} sequential, agent ledger {args.ledger}: p50 {p50:.0f} us "
        f"(goal <= 300 us), p99 {p99:.0f} us (goal <= 2,000 us); {'met' if met else 'NOT met'}\n"
        f"  of which send_command: p50 {statistics.median(sent):.0f} us, p99 "
        f"{pct(sent, 99):.0f} us\n"
        f"  CPU per command: Console {cpu['console'] * 1e6:.0f} us (incl. the result's commit "
        f"and ack), agent {cpu['agent'] * 1e6:.0f} us, nats-server "
        f"{cpu['nats-server'] * 1e6:.0f} us; load average {load}"
    )


if __name__ == "__main__":
    main()
