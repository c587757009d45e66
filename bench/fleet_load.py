"""A fleet of simulated agents for the Console-side measures: preloaded into the database in bulk,
heartbeating through a real nats-server from a separate process over a few connections.

    (used by ``bench.heartbeats`` and ``bench.fleet_scale``; the generator runs as
    ``python -m bench.fleet_load --nats URL --creds FILE --agents FILE ...``)

How 100,000 agents fit on this machine: the agents are rows (``preload_agents``: one multi-row
INSERT per 5,000), not processes, and their heartbeats come from **one generator process**
holding a few NATS connections (``Generator(connections=4)``), each its own user of the agents'
environment account allowed to publish ``proxima.agent.*.heartbeat`` and nothing else. Each
agent beats every ``--interval`` seconds at its own phase (agent *i* at ``i * interval / N``
into each period), so the offered rate is flat at ``N / interval`` per second. Every message is
a real ``Heartbeat`` (its own agent id, instance id, ``sent_at`` now) on the agent's own
subject, in the environment account the Console listens in, so the Console's whole ingest
path runs: subject → environment gate → decode and bounds → batch → UPDATE.

What it does not exercise: one TCP connection, TLS-less nkey handshake and permission set per
agent (the server holds 4 connections, not 100,000; per-agent subject permissions are checked
by the server for the real agents in ``testkit.swarm`` and the security tests), agents'
commands and results, metrics and inventory messages, and an agent's reconnect storm.

Control (the generator's stdin, one line each): ``stop <n>`` stops the first ``n`` agents of
the sample list (the last agents of the file) and prints one JSON line
``{"stopped": {agent_id: last_sent_epoch_seconds}}``; ``quit`` ends it. It prints
``{"sent": total}`` every second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import nkeys

from testkit.console import ConsoleProcess

HEARTBEAT_PUB = "proxima.agent.*.heartbeat"


def preload_agents(console: ConsoleProcess, count: int, *, offline_share: float = 0.0) -> list[str]:
    """``count`` host agents in the bootstrap environment, seen now (or ``offline_share`` of them
    two days ago), in batches of 5,000; their ids in phase order."""
    from datetime import timedelta

    from sqlalchemy import insert

    from console.core.db import make_engine
    from console.models import Agent
    from testkit.preload import agent_row

    info = console.bootstrap_info
    now = datetime.now(UTC)
    ids = [uuid.uuid4().hex for _ in range(count)]
    offline_every = int(1 / offline_share) if offline_share else 0
    engine = make_engine(console.database_url())
    try:
        with engine.begin() as conn:
            for start in range(0, count, 5000):
                rows = [
                    agent_row(
                        agent_id=ids[i],
                        client_id=info["client_id"],
                        environment_id=info["environment_id"],
                        name=f"host-{i:06d}",
                        public_key=f"U{i:055d}",
                        enrolled_at=now,
                        labels={"rack": f"r{i % 40}"},
                        last_seen_at=(
                            now - timedelta(days=2)
                            if offline_every and i % offline_every == 0
                            else now
                        ),
                    )
                    for i in range(start, min(count, start + 5000))
                ]
                conn.execute(insert(Agent), rows)
    finally:
        engine.dispose()
    return ids


def pid_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (Linux /proc; children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def pid_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def nats_server_pid(console: ConsoleProcess) -> int | None:
    import psutil

    assert console.process is not None
    for child in psutil.Process(console.process.pid).children(recursive=True):
        if "nats-server" in child.name():
            return int(child.pid)
    return None


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def p99_from_buckets(text: str, name: str, since: str | None = None) -> float:
    """The histogram bucket bound under which 99% fall (of the observations after ``since``,
    an earlier scrape of the same histogram, when given)."""

    def buckets(t: str) -> list[tuple[float, float]]:
        out = []
        for line in t.splitlines():
            if line.startswith(f"{name}_bucket"):
                le = line.split('le="')[1].split('"')[0]
                out.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
        return out

    now = buckets(text)
    base = dict(buckets(since)) if since else {}
    diffs = [(le, count - base.get(le, 0.0)) for le, count in now]
    total = diffs[-1][1] if diffs else 0
    for le, count in diffs:
        if total and count >= 0.99 * total:
            return le
    return float("nan")


class Generator:
    """The generator process, driven from the benchmark: start, read its counts, stop agents."""

    def __init__(
        self,
        console: ConsoleProcess,
        agent_ids: list[str],
        *,
        interval: float,
        workdir: Path,
        connections: int = 4,
    ) -> None:
        users = []  # one key per connection: the Console allows a key few connections
        for k in range(connections):
            seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
            public = nkeys.from_seed(bytearray(seed)).public_key.decode()
            jwt = console.nats_user_jwt(public, pub=[HEARTBEAT_PUB], name=f"bench-hb-{k}")
            users.append({"jwt": jwt, "seed": seed.decode()})
        creds = workdir / "generator.json"
        creds.write_text(json.dumps(users))
        ids = workdir / "agents.txt"
        ids.write_text("\n".join(agent_ids))
        self.sent = 0
        self.stopped: dict[str, float] = {}
        self._stopped_event = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.fleet_load",
                "--nats",
                console.nats_url,
                "--creds",
                str(creds),
                "--agents",
                str(ids),
                "--interval",
                str(interval),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "sent" in message:
                self.sent = int(message["sent"])
            if "stopped" in message:
                self.stopped = {k: float(v) for k, v in message["stopped"].items()}
                self._stopped_event.set()

    def _say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop_agents(self, count: int, timeout: float = 30) -> dict[str, float]:
        self._say(f"stop {count}")
        if not self._stopped_event.wait(timeout):
            raise TimeoutError("the generator did not confirm the stop")
        return self.stopped

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._say("quit")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


# --- the generator process ------------------------------------------------------------------


def _bodies(agent_ids: list[str], interval: float) -> list[tuple[str, str, str]]:
    """(subject, JSON before ``sent_at``, JSON after it) per agent: one string join a beat."""
    out = []
    for agent_id in agent_ids:
        head = (
            f'{{"agent_id":"{agent_id}","instance_id":"i-{agent_id[:12]}","agent_type":"host",'
            f'"version":"0.8.0","sent_at":"'
        )
        tail = f'","uptime_seconds":100.0,"heartbeat_interval_seconds":{interval}}}'
        out.append((f"proxima.agent.{agent_id}.heartbeat", head, tail))
    return out


async def _generate(args: argparse.Namespace, stdin: TextIO) -> None:
    import nats

    users = json.loads(Path(args.creds).read_text())
    agent_ids = Path(args.agents).read_text().split()
    conns = [
        await nats.connect(
            args.nats,
            nkeys_seed_str=user["seed"],
            user_jwt_cb=lambda jwt=user["jwt"]: jwt.encode(),
            name=f"bench-heartbeats-{k}",
            pending_size=64 * 1024 * 1024,
        )
        for k, user in enumerate(users)
    ]
    bodies = _bodies(agent_ids, args.interval)
    n = len(agent_ids)
    stopped: set[int] = set()
    last_sent: dict[int, float] = {}
    commands: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def read_stdin() -> None:
        for line in stdin:
            loop.call_soon_threadsafe(commands.put_nowait, line.strip())
        loop.call_soon_threadsafe(commands.put_nowait, "quit")

    threading.Thread(target=read_stdin, daemon=True).start()
    start = time.perf_counter()
    cursor = published = 0
    last_report = start
    while True:
        while not commands.empty():
            cmd = commands.get_nowait()
            if cmd == "quit":
                for nc in conns:
                    try:
                        await nc.close()
                    except OSError:
                        pass  # the server went first
                return
            if cmd.startswith("stop "):
                sample = range(n - 1, n - 1 - int(cmd.split()[1]), -1)
                stopped.update(sample)
                for nc in conns:
                    await nc.flush()
                report = {agent_ids[i]: last_sent.get(i, 0.0) for i in sample}
                print(json.dumps({"stopped": report}), flush=True)
        elapsed = time.perf_counter() - start
        target = int(elapsed * n / args.interval)
        if target > cursor:
            stamp = datetime.now(UTC).isoformat()
            wall = time.time()
            for k in range(cursor, target):
                i = k % n
                if i in stopped:
                    continue
                subject, head, tail = bodies[i]
                await conns[i % len(conns)].publish(subject, (head + stamp + tail).encode())
                published += 1
                if i >= n - 1000:
                    last_sent[i] = wall
            cursor = target
        now = time.perf_counter()
        if now - last_report >= 1.0:
            print(json.dumps({"sent": published}), flush=True)
            last_report = now
        await asyncio.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description="heartbeat generator (see module docstring)")
    parser.add_argument("--nats", required=True)
    parser.add_argument("--creds", required=True, help="JSON: [{jwt, seed}] per connection")
    parser.add_argument("--agents", required=True, help="file of agent ids, one a line")
    parser.add_argument("--interval", type=float, default=30.0)
    args = parser.parse_args()
    asyncio.run(_generate(args, sys.stdin))


if __name__ == "__main__":
    main()
