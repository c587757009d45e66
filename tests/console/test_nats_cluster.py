"""Several Consoles on one database and a real 3-node NATS cluster: the servers are
configured with ``proxima-console nats-config`` (the same trust block on every node, written
once, never edited again), both replicas push account claims through the system account, agents
enrolled through either replica connect to any node, and a revocation through one replica cuts
an agent connected to another node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest

from console.core.db import make_engine
from console.nats.jwt import decode_claims
from console.nats.server import nats_server_binary
from console.services import nats_keys
from contracts import subjects
from testkit import REPO
from testkit.agents import AgentProcess, fake_host_root
from testkit.console import ConsoleProcess, Identity
from testkit.net import free_port
from testkit.waiting import await_for, wait_for


@dataclass
class Node:
    name: str
    workdir: Path
    port: int
    route_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


def _nats_config(data_dir: Path, database_url: str) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PROXIMA_DATA_DIR": str(data_dir),
        "PROXIMA_DATABASE_URL": database_url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "console", "nats-config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def _start_cluster(root: Path, trust: str) -> list[Node]:
    nodes = [Node(f"n{i}", root / f"n{i}", free_port(), free_port()) for i in range(1, 4)]
    routes = ", ".join(f'"nats-route://127.0.0.1:{n.route_port}"' for n in nodes)
    for node in nodes:
        node.workdir.mkdir(parents=True)
        (node.workdir / "trust.conf").write_text(trust)
        (node.workdir / "nats.conf").write_text(
            "\n".join(
                [
                    f"server_name: {node.name}",
                    f'listen: "127.0.0.1:{node.port}"',
                    f"ports_file_dir: {json.dumps(str(node.workdir))}",
                    "cluster {",
                    "  name: proxima",
                    f'  listen: "127.0.0.1:{node.route_port}"',
                    f"  routes: [{routes}]",
                    "}",
                    'include "trust.conf"',
                    "",
                ]
            )
        )
        node.process = subprocess.Popen(
            [nats_server_binary(), "-c", str(node.workdir / "nats.conf")],
            cwd=node.workdir,
            stdout=open(node.workdir / "log", "ab"),
            stderr=subprocess.STDOUT,
        )
    for node in nodes:
        assert node.process is not None
        ports = node.workdir / f"{Path(nats_server_binary()).name}_{node.process.pid}.ports"
        wait_for(ports.exists, 10, f"nats node {node.name}")
    return nodes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[list[Node], str, Path]]:
    """A database with its keys, and three nats-server nodes configured from nats-config."""
    database_url = f"sqlite:///{tmp_path / 'shared.db'}"
    trust = _nats_config(tmp_path / "cfg-a", database_url)
    assert trust == _nats_config(tmp_path / "cfg-b", database_url)  # identical for every node
    nodes = _start_cluster(tmp_path / "nats", trust)
    try:
        yield nodes, database_url, tmp_path
    finally:
        for node in nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
                node.process.wait(10)


def _replica(root: Path, name: str, database_url: str, nats_url: str) -> ConsoleProcess:
    return ConsoleProcess(
        root / name,
        database_url=database_url,
        env={
            "PROXIMA_NATS_URL": nats_url,
            "PROXIMA_IDENTITY_QUIET_SECONDS": "1.5",
            "PROXIMA_AGENT_STALE_SECONDS": "1.5",
        },
    )


async def _system_lookup(database_url: str, node: Node, account: str) -> dict:
    """The account JWT ``node`` holds, asked through a system-account user."""
    engine = make_engine(database_url)
    try:
        authority = nats_keys.load_authority(engine)
    finally:
        engine.dispose()
    me = Identity(name="sys")
    me.jwt = authority.system_user_jwt(me.public_key)
    nc = await nats.connect(node.url, **me.nats_options(), allow_reconnect=False)
    try:
        reply = await nc.request(f"$SYS.REQ.ACCOUNT.{account}.CLAIMS.LOOKUP", b"", timeout=3)
        return decode_claims(reply.data.decode())
    finally:
        await nc.close()


async def test_two_replicas_share_the_trust_of_a_three_node_cluster(cluster, tmp_path):
    nodes, database_url, root = cluster
    one = _replica(root, "replica-1", database_url, nodes[0].url)
    # Replica 2 names nodes 2 and 3, comma-separated, as an operator would list a cluster.
    two = _replica(root, "replica-2", database_url, f"{nodes[1].url},{nodes[2].url}")
    try:
        started = time.monotonic()
        one.start()
        two.token, two.bootstrap_info = one.token, one.bootstrap_info
        two.start()
        print(f"\ntwo replicas up on the cluster in {time.monotonic() - started:.2f} s")
        token = one.install_token()
        x = Identity(name="web-x", machine_id="m-x")
        x_id = x.enroll(one, token).json()["agent_id"]  # through replica 1
        y = Identity(name="web-y", machine_id="m-y")
        assert y.enroll(two, token).status_code == 201  # through replica 2
        account = decode_claims(x.jwt or "")["iss"]
        assert decode_claims(y.jwt or "")["iss"] == account  # one environment, one account

        closed: list[float] = []

        async def on_closed() -> None:
            closed.append(time.monotonic())

        # Each connects to a node neither replica uses.
        x_nc = await nats.connect(
            nodes[2].url, **x.nats_options(), allow_reconnect=False, closed_cb=on_closed
        )
        y_nc = await nats.connect(nodes[2].url, **y.nats_options(), allow_reconnect=False)
        try:
            await x_nc.publish(subjects.heartbeat(x_id), b"{}")
            await x_nc.flush()
            # A revocation through replica 2 cuts X, enrolled through replica 1, on node 3.
            with two.client() as c:
                asked = time.monotonic()
                assert c.post(f"/api/v1/fleet/agents/{x_id}/revoke").status_code == 200
                answered = time.monotonic()
            await await_for(lambda: closed, timeout=10, what="X cut on node 3")
            print(
                f"revoke API {1000 * (answered - asked):.0f} ms; "
                f"connection on another node closed {1000 * (closed[0] - asked):.0f} ms after"
            )
            await y_nc.flush(timeout=2)
            assert y_nc.is_connected  # the other agent of the account keeps its connection
            for node in nodes:  # every node holds the account with the revocation
                held = await _system_lookup(database_url, node, account)
                assert x.public_key in held["nats"]["revocations"], node.name
            with pytest.raises(Exception):  # noqa: B017 - refused, however the client says it
                again = await nats.connect(
                    nodes[0].url, **x.nats_options(), allow_reconnect=False, connect_timeout=3
                )
                await again.close()
        finally:
            await x_nc.close()
            await y_nc.close()
        # A real agent enrolled through replica 2 heartbeats through the cluster.
        agent = AgentProcess(
            tmp_path / "real",
            backend_url=two.url,
            install_token=token,
            host_root=fake_host_root(tmp_path / "real-root", machine_id="m-real"),
        ).start()
        try:
            real_id = agent.agent_id()
            agent.wait_ready()
            assert one.agent(real_id)["status"] == "online"  # replica 1 sees it too
        finally:
            agent.stop()
    finally:
        two.stop()
        one.stop()
