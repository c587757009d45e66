"""More than one Console, and nothing lost: two Console replicas on
PostgreSQL behind a round-robin load balancer, a 3-node NATS cluster and the ``fleet-rollout``
flow run under Prefect; agents enrolled through both replicas; a build uploaded through one and
rolled out to ``PROXIMA_HA_SIM_AGENTS`` simulated agents (1,000 by default) plus a few real
host agents that really self-update, while one replica and one NATS node are SIGKILLed in the
middle of a wave.

Checked: every agent ends on the new version, no agent receives a command twice, no result is
lost (counted), every agent heartbeats again within 30 s of each kill, and a web session signed
in on the killed replica is served by the other one.

The deployment is ``deploy/scaled/`` as the docs give it (``testkit.scaled``): every NATS node
runs ``deploy/scaled/nats-cluster.conf`` verbatim, the replicas get exactly the settings
``deploy/scaled/console.env`` names (with this machine's addresses), in the order
``docs/scaling.md`` gives (database, ``nats-config``, NATS nodes, replicas).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollout_policy import AgentId, PercentGrowth, WavePolicy, plan_waves
from testkit import REPO
from testkit.agents import AgentProcess
from testkit.builds import Builds
from testkit.console import ConsoleProcess
from testkit.net import free_port
from testkit.postgres import ThrowawayPostgres
from testkit.proxy import RoundRobinProxy
from testkit.scaled import NatsCluster, nats_config, scaled_console_env
from testkit.signing_in import browser, page_status, signed_in
from testkit.swarm import Delivery, Swarm
from testkit.waiting import wait_for

pytestmark = pytest.mark.postgres

SIM_AGENTS = int(os.environ.get("PROXIMA_HA_SIM_AGENTS", "1000"))
REAL_AGENTS = int(os.environ.get("PROXIMA_HA_REAL_AGENTS", "2"))
HEARTBEAT = 3.0  # the simulated agents' interval (s)
RECOVERY_LIMIT = 30.0  # every agent heartbeats again within this of each kill
WAVE_TIMEOUT = 90
WAVES = {"canary_size": 1, "percentages": [50, 100], "max_wave_size": 100_000}
CRITERIA = [  # docs/rollouts.md
    {"failure_type": "failed", "threshold_percent": 10, "min_executed": 5},
    {"failure_type": "timed_out", "threshold_count": 20, "action": "abort"},
]
REAL_AGENT_ENV = {
    "PROXIMA_UPDATE_HEALTH_TIMEOUT": "120s",
    "PROXIMA_RESULT_RETRY_MAX": "2s",
    "PROXIMA_RESULT_ACK_TIMEOUT": "2s",
    "PROXIMA_NATS_RECONNECT_MAX_WAIT": "1s",
    "PROXIMA_HEARTBEAT_INTERVAL": "2s",
}
# Beyond console.env: the suite's quicker clocks.
TEST_ENV = {
    "PROXIMA_RESULT_GRACE_SECONDS": "8",  # above the agents' 2 s backoff plus 2 s ack wait
    "PROXIMA_AGENT_STALE_SECONDS": "30",
    "PROXIMA_DRIVER_CHECK_SECONDS": "5",
}


@dataclass
class Deployment:
    replicas: list[ConsoleProcess]
    nats: NatsCluster
    proxy: RoundRobinProxy
    prefect_api_url: str
    root: Path
    swarms: list[Swarm] = field(default_factory=list)
    real: list[AgentProcess] = field(default_factory=list)
    flow: subprocess.Popen[bytes] | None = None

    def api(self, via: ConsoleProcess | None = None) -> httpx.Client:
        """Through the load balancer, or one replica."""
        url = via.url if via is not None else self.proxy.url
        return httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {self.replicas[0].token}"},
            timeout=60,
        )


@pytest.fixture
def deployment(
    tmp_path: Path, postgres: ThrowawayPostgres, prefect_api_url: str, builds: Builds
) -> Iterator[Deployment]:
    started = time.monotonic()
    database_url = postgres.create_database()
    ports = [free_port(), free_port()]
    proxy = RoundRobinProxy([("127.0.0.1", p) for p in ports])
    a = ConsoleProcess(tmp_path / "replica-a", database_url=database_url, port=ports[0])
    a.bootstrap_info = a.bootstrap()  # proxima-console migrate + bootstrap
    a.token = a.bootstrap_info["token"]
    nats = NatsCluster(tmp_path / "nats", nats_config(database_url, tmp_path / "nats-config"))
    replicas: list[ConsoleProcess] = []
    deployment = Deployment(replicas, nats, proxy, prefect_api_url, tmp_path)
    try:
        nats.start()
        proxy.start()
        for name, port in zip(("replica-a", "replica-b"), ports, strict=True):
            env = scaled_console_env(
                {
                    "PROXIMA_DATABASE_URL": database_url,
                    "PROXIMA_NATS_URL": nats.url,
                    "PROXIMA_NATS_PUBLIC_URL": nats.url,
                    "PROXIMA_PUBLIC_URL": proxy.url,
                    "PROXIMA_PREFECT_API_URL": prefect_api_url,
                    "PROXIMA_SIGNING_PUBLIC_KEYS": builds.public_key,
                    "PROXIMA_HOST": "127.0.0.1",
                    "PROXIMA_PORT": str(port),
                }
            )
            replica = a if name == "replica-a" else ConsoleProcess(tmp_path / name, port=port)
            replica.env.update({**env, **TEST_ENV})
            replica.token, replica.bootstrap_info = a.token, a.bootstrap_info
            replicas.append(replica.start(timeout=120))
        print(f"\ndeployment up in {time.monotonic() - started:.1f} s")
        yield deployment
    finally:
        if deployment.flow is not None and deployment.flow.poll() is None:
            deployment.flow.kill()
            deployment.flow.wait()
        for swarm in deployment.swarms:
            swarm.stop()
        for agent in deployment.real:
            agent.stop()
        for replica in replicas:
            replica.stop()
        proxy.stop()
        nats.stop()


def _real_agents(d: Deployment, builds: Builds, agents: Any, token: str) -> None:
    """Real host agents on the old build, enrolled through the load balancer."""
    for i in range(REAL_AGENTS):
        program = d.root / f"real-{i}" / "bin" / "proxima-agent.pyz"
        program.parent.mkdir(parents=True)
        shutil.copy2(builds.old.path, program)
        env = {**REAL_AGENT_ENV, "PROXIMA_SIGNING_PUBLIC_KEY": builds.public_key}
        d.real.append(
            agents(d.replicas[0], f"real-{i}", token, program=program, env=env,
                   backend_url=d.proxy.url)
        )  # fmt: skip


def _all_agents(d: Deployment, via: ConsoleProcess) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    with d.api(via) as c:
        while True:
            page = c.get("/api/v1/fleet/agents", params={"limit": 1000, "offset": len(found)})
            page.raise_for_status()
            items = page.json()["items"]
            found.extend(items)
            if len(items) < 1000:
                return found


def _seen_after(agents: list[dict[str, Any]], instant: float) -> int:
    return sum(
        a["last_seen_at"] is not None
        and datetime.fromisoformat(a["last_seen_at"]).timestamp() > instant
        for a in agents
    )


def _flow(d: Deployment, rollout_id: str, token: str) -> subprocess.Popen[bytes]:
    """The fleet-rollout flow as a Prefect flow run, reaching the Console through the load
    balancer with the worker's token (what a worker's job runs)."""
    code = (
        "from flows.rollout import fleet_rollout; "
        f"fleet_rollout(rollout_id={rollout_id!r}, poll_seconds=0.5)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXIMA_")}
    env.update(
        {
            "PREFECT_API_URL": d.prefect_api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PYTHONPATH": str(REPO),
            "PROXIMA_CONSOLE_URL": d.proxy.url,
            "PROXIMA_CONSOLE_TOKEN": token,
        }
    )
    with open(d.root / "flow.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )


def _recovery(d: Deployment, via: ConsoleProcess, kills: dict[str, float], total: int) -> dict:
    """Seconds from each kill until every agent's heartbeat after it was recorded."""
    recovered: dict[str, float] = {}

    def everyone_beat_again() -> bool:
        agents = _all_agents(d, via)
        now = time.time()
        for what, at in kills.items():
            if what not in recovered and _seen_after(agents, at) == total:
                recovered[what] = now - at
        return len(recovered) == len(kills)

    wait_for(everyone_beat_again, timeout=RECOVERY_LIMIT + 60, what="every agent heartbeating")
    return recovered


def test_two_replicas_and_a_nats_cluster_lose_nothing_when_one_of_each_is_killed_mid_wave(
    deployment: Deployment, builds: Builds, agents: Any
) -> None:
    d = deployment
    a, b = d.replicas
    t0 = time.monotonic()
    token = a.install_token()
    # Enrolled through both replicas: half through each; the real ones through the balancer.
    half = SIM_AGENTS // 2
    for replica, count, prefix in ((a, half, "sim-a"), (b, SIM_AGENTS - half, "sim-b")):
        swarm = Swarm(replica, count, prefix=prefix, heartbeat_seconds=HEARTBEAT,
                      result_delay=4.0, nats_servers=d.nats.urls)  # fmt: skip
        d.swarms.append(swarm.start())
    _real_agents(d, builds, agents, token)
    real_ids = [agent.agent_id() for agent in d.real]
    total = SIM_AGENTS + REAL_AGENTS
    wait_for(
        lambda: all(
            (v := b.agent(i))["version"] == "0.8.0" and v["can_self_update"] for i in real_ids
        ),
        timeout=120,
        what="the real agents online, able to self-update",
    )
    enrolled = time.monotonic()
    print(f"{total} agents enrolled and connected in {enrolled - t0:.1f} s")

    # The web UI: signed in on replica A (which will be killed).
    cookie = signed_in(browser(a.url), a.token)
    assert page_status(a.url, cookie) == 200

    # A build uploaded through replica A, the rollout created through the balancer.
    with d.api(a) as c:
        up = c.put("/api/v1/artifacts/0.9.0", params={"signature": builds.new.signature},
                   content=builds.new.path.read_bytes())  # fmt: skip
        assert up.status_code == 201, up.text
    sim_ids = [s.agent_id for swarm in d.swarms for s in swarm.agents]
    everyone = sorted(AgentId(i) for i in [*real_ids, *sim_ids])
    policy = WavePolicy(canary_size=1, growth=PercentGrowth((50, 100)), max_wave_size=100_000)
    seed = next(
        f"s{n}"
        for n in range(10_000)
        if set(real_ids) <= set(plan_waves(everyone, policy, f"s{n}").waves[1].agent_ids)
    )
    with d.api() as c:
        r = c.post("/api/v1/fleet/rollouts", json={
            "name": "ha", "artifact": up.json(), "start_flow": False, "seed": seed,
            "waves": WAVES, "criteria": CRITERIA, "wave_timeout_seconds": WAVE_TIMEOUT,
        })  # fmt: skip
        assert r.status_code == 201, r.text
        rollout_id = r.json()["id"]
    assert len(r.json()["targets"]) == total, r.json()["excluded"]
    d.flow = _flow(d, rollout_id, a.worker_token())

    def rollout(via: ConsoleProcess = b, targets: bool = False) -> dict[str, Any]:
        with d.api(via) as c:
            got = c.get(f"/api/v1/fleet/rollouts/{rollout_id}", params={"targets": targets})
            got.raise_for_status()
            data: dict[str, Any] = got.json()
            return data

    # Mid-wave: wave 1 (half the fleet, the real agents among it) sent, a tenth of it answered.
    wave1 = wait_for(
        lambda: (
            (w := rollout()["waves"][1])["dispatched"]
            and w["counts"].get("succeeded", 0) >= w["size"] // 10
            and w
        ),
        timeout=180,
        what="wave 1 sent by the flow, a tenth of it answered",
    )
    rolled = time.monotonic()
    a_killed_at = time.time()
    a.kill()
    victim = 1  # a third of the agents are connected to it (they pick nodes at random)
    nats_killed_at = time.time()
    d.nats.kill(victim)
    kills = {"replica": a_killed_at, "nats node": nats_killed_at}
    recovered = _recovery(d, b, kills, total)
    back_at = time.time()
    # The session signed in on A is served by B: directly, and through the balancer.
    assert page_status(b.url, cookie) == 200
    assert page_status(d.proxy.url, cookie) == 200

    final = wait_for(
        lambda: (x := rollout(targets=True))["state"] in ("succeeded", "aborted", "failed") and x,
        timeout=240,
        what="the flow to finish the rollout",
    )
    finished = time.monotonic()
    assert d.flow.wait(timeout=60) == 0, (d.root / "flow.log").read_text()[-3000:]
    # Results in flight at the kills (sent, not yet acknowledged) or sent until every agent
    # heartbeated again.
    during: list[Delivery] = [
        dl
        for swarm in d.swarms
        for dl in swarm.deliveries()
        if dl.first_sent <= back_at and (dl.acked is None or dl.acked >= a_killed_at)
    ]
    statuses = {t["command_id"]: t["status"] for t in final["targets"]}
    lost = [dl for dl in during if statuses.get(dl.command_id) != "succeeded"]
    received = [n for swarm in d.swarms for n in swarm.received_by().values()]
    real_retried = sum("not acknowledged yet" in agent.log() for agent in d.real)
    real_received = [
        len(re.findall(r"command (\w+) \(self_update\) received", agent.log())) for agent in d.real
    ]
    print(
        f"wave 1 ({wave1['size']} agents) sent and a tenth answered {rolled - enrolled:.1f} s "
        f"after enrollment; replica A and NATS node {victim} SIGKILLed.\n"
        f"heartbeats of every agent again after the replica kill "
        f"{recovered['replica']:.1f} s, after the NATS node kill {recovered['nats node']:.1f} s; "
        f"results in flight at the kills or sent until then: {len(during)} simulated (+ "
        f"{real_retried} real ones retried), lost {len(lost)}, retries "
        f"{sum(dl.attempts - 1 for dl in during)}; commands received per simulated agent "
        f"{sorted(set(received))}, per real agent {real_received}; rollout {final['state']} "
        f"{finished - rolled:.1f} s after the kills; whole test {finished - t0:.1f} s; "
        f"balancer connections {dict(d.proxy.connections)} (refused {d.proxy.refused})"
    )
    assert final["state"] == "succeeded", final.get("threshold") or final.get("state_reason")
    assert final["counts"]["succeeded"] == total, final["counts"]
    assert during, "no result was sent during the faults: the test proves nothing"
    assert lost == []
    # Received at least once (a command with no result yet may be sent again, same id: the
    # killed NATS node may have taken it), run exactly once.
    assert min(received) >= 1, "a simulated agent received no command"
    runs = [n for swarm in d.swarms for n in swarm.runs().values()]
    assert len(runs) == len(received) and set(runs) == {1}, "a command ran twice (or none)"
    assert real_received == [1] * REAL_AGENTS
    assert {s.version for swarm in d.swarms for s in swarm.agents} == {"0.9.0"}
    wait_for(
        lambda: all(b.agent(i)["version"] == "0.9.0" for i in real_ids),
        timeout=120,
        what="the real agents report 0.9.0",
    )
    assert max(recovered.values()) <= RECOVERY_LIMIT, recovered
    assert d.nats.nodes[victim].process is None  # still down: two nodes carried the fleet
    assert a.process is None  # and one replica
