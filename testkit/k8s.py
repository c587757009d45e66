"""Test kit for the Kubernetes agents: a NATS observer with the Console's trust, a fake kubelet,
and real cluster/node agent processes wired to a real Console and the Kubernetes API double.

Nothing here sleeps for a fixed time; every wait polls a condition against a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nkeys

from contracts import subjects
from contracts.inventory import ChunkHeader, InventorySnapshot, assemble, split_chunk
from contracts.slugs import slugify
from testkit.agents import AgentProcess
from testkit.console import ConsoleProcess
from testkit.kube.tls import make_serving_certificate
from testkit.net import send_json
from testkit.waiting import wait_for

# Fast leader election for tests: a standby takes over ~2 s after the leader's last renewal.
FAST_LEASE = {
    "PROXIMA_LEASE_DURATION": "2s",
    "PROXIMA_LEASE_RENEW_DEADLINE": "1.5s",
    "PROXIMA_LEASE_RETRY_PERIOD": "0.3s",
}
LEASE_DURATION = 2.0
RETRY_PERIOD = 0.3

# The NATS max_payload of the Kubernetes agents' Console (``k8s_console``): small enough that a
# 5,000-pod inventory must be chunked.
MAX_PAYLOAD = 32 * 1024


# -- the Console side -------------------------------------------------------------------------


def register_cluster(console: ConsoleProcess, name: str) -> tuple[str, str]:
    """Onboard a cluster as the wizard does: (slug, install token bound to it)."""
    with console.client() as c:
        r = c.post("/api/v1/clusters", json={"name": name})
        r.raise_for_status()
        slug = str(r.json()["slug"])
    return slug, console.install_token(cluster_slug=slug)


def cluster_view(console: ConsoleProcess, slug: str) -> dict[str, Any]:
    with console.client() as c:
        r = c.get(f"/api/v1/clusters/{slug}")
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data


def cluster_inventory(
    console: ConsoleProcess, slug: str, kind: str, limit: int = 10000
) -> dict[str, Any]:
    with console.client() as c:
        r = c.get(f"/api/v1/clusters/{slug}/inventory", params={"kind": kind, "limit": limit})
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic() in the test process when it arrived
    agent_id: str
    kind: str  # "inventory" | "heartbeat" | "metrics"
    data: dict[str, Any]


class NatsObserver:
    """Subscribes to every agent's heartbeats, metrics and inventory chunks with a user the
    Console's NATS authority signs (subscribe-only), in a thread with its own event loop."""

    def __init__(self, console: ConsoleProcess) -> None:
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        public = nkeys.from_seed(bytearray(seed)).public_key.decode()
        self._jwt = console.nats_user_jwt(public, sub=[">"], name="test-observer")
        self._seed = seed.decode()
        self._url = console.nats_url
        self.seen: list[Seen] = []
        # The chunks of each inventory sync, by (agent id, sync id), in arrival order.
        self._chunks: dict[tuple[str, str], list[tuple[ChunkHeader, bytes]]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._error: BaseException | None = None

    def start(self) -> NatsObserver:
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise AssertionError(f"nats observer did not connect: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as e:  # reported by start()
            self._error = e
            self._ready.set()

    async def _main(self) -> None:
        import nats

        jwt = self._jwt.encode()
        nc = await nats.connect(
            self._url,
            nkeys_seed_str=self._seed,
            user_jwt_cb=lambda: jwt,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
        )
        self._stop = asyncio.Event()

        async def on_message(msg: Any) -> None:
            agent_id = subjects.agent_id_of(msg.subject)
            kind = msg.subject.rsplit(".", 1)[-1]
            if kind == "inventory":
                header, part = split_chunk(msg.data)
                data = {**header.model_dump(), "bytes": len(msg.data)}
                with self._lock:
                    self._chunks.setdefault((agent_id, header.sync_id), []).append((header, part))
            else:
                data = json.loads(msg.data)
            with self._lock:
                self.seen.append(Seen(time.monotonic(), agent_id, kind, data))

        for subject in (subjects.ALL_INVENTORY, subjects.ALL_HEARTBEATS, subjects.ALL_METRICS):
            await nc.subscribe(subject, cb=on_message)
        await nc.flush()
        self._ready.set()
        await self._stop.wait()
        await nc.close()

    # -- reading what was seen --------------------------------------------------------------

    def of(self, kind: str, agent_id: str | None = None, since: float = 0.0) -> list[Seen]:
        with self._lock:
            return [
                s
                for s in self.seen
                if s.kind == kind and s.at >= since and (agent_id is None or s.agent_id == agent_id)
            ]

    def syncs(self, agent_id: str | None = None, since: float = 0.0) -> list[Seen]:
        """The first chunk of each inventory sync."""
        return [s for s in self.of("inventory", agent_id, since) if s.data["seq"] == 0]

    def snapshots(self, agent_id: str) -> list[InventorySnapshot]:
        """Every complete inventory sync of ``agent_id`` as it travelled, oldest first."""
        with self._lock:
            syncs = [
                chunks
                for (publisher, _sync), chunks in self._chunks.items()
                if publisher == agent_id and len(chunks) == chunks[0][0].total
            ]
        return [assemble(chunks) for chunks in syncs]

    def publishers(self, since: float = 0.0) -> list[str]:
        """Agent ids in the order their inventory chunks arrived, runs collapsed."""
        order: list[str] = []
        for s in self.of("inventory", since=since):
            if not order or order[-1] != s.agent_id:
                order.append(s.agent_id)
        return order


@contextmanager
def observing(console: ConsoleProcess) -> Iterator[NatsObserver]:
    observer = NatsObserver(console).start()
    try:
        yield observer
    finally:
        observer.stop()


# -- agent processes ----------------------------------------------------------------------------


def cluster_agent(
    tmp: Path,
    console: ConsoleProcess,
    kubeconfig_env: dict[str, str],
    *,
    token: str,
    cluster_name: str,
    ordinal: int = 0,
    replicas: int = 1,
    env: dict[str, str] | None = None,
) -> AgentProcess:
    """A ``k8s-cluster-collector`` process as the chart's StatefulSet would run it: named like
    its pod, ``<release>-cluster-agent-<ordinal>`` (the release named after the cluster, so
    tests sharing one Console do not collide on enrollment names)."""
    name = f"{slugify(cluster_name)}-cluster-agent-{ordinal}"
    return AgentProcess(
        name=name,
        data_dir=tmp / name,
        backend_url=console.url,
        install_token=token,
        agent_type="k8s-cluster-collector",
        heartbeat="0.3s",
        env={
            **kubeconfig_env,
            "PROXIMA_CLUSTER_NAME": cluster_name,
            "PROXIMA_POD_NAMESPACE": "proxima-system",
            "PROXIMA_LEASE_NAME": "proxima-agent-cluster-agent",
            "PROXIMA_REPLICAS": str(replicas),
            "PROXIMA_SYNC_INTERVAL": "0.5s",
            **FAST_LEASE,
            **(env or {}),
        },
    )


def stop_all(agents: list[AgentProcess]) -> None:
    for agent in agents:
        if agent.process is not None and agent.process.poll() is None:
            agent.process.terminate()
    for agent in agents:
        agent.stop()


def count(text: str, needle: str) -> int:
    return text.count(needle)


# -- a kubelet ----------------------------------------------------------------------------------


def stats_summary(node: str, pods: int = 20) -> dict[str, Any]:
    """A kubelet ``/stats/summary`` of realistic shape."""
    return {
        "node": {
            "nodeName": node,
            "cpu": {"time": "2025-01-01T00:00:00Z", "usageNanoCores": 412_000_000},
            "memory": {
                "workingSetBytes": 3_100_000_000,
                "availableBytes": 12_900_000_000,
                "usageBytes": 4_000_000_000,
            },
            "network": {
                "interfaces": [
                    {"name": "eth0", "rxBytes": 10_000, "txBytes": 20_000},
                    {"name": "cni0", "rxBytes": 1_000, "txBytes": 2_000},
                ]
            },
            "fs": {"capacityBytes": 100_000_000_000, "usedBytes": 40_000_000_000},
            "runtime": {"imageFs": {"capacityBytes": 100_000_000_000, "usedBytes": 9_000_000_000}},
            "systemContainers": [{"name": "kubelet"}],
        },
        "pods": [
            {
                "podRef": {"name": f"web-{i}", "namespace": "shop", "uid": str(uuid.uuid4())},
                "cpu": {"usageNanoCores": 1_000_000 * (i + 1)},
                "memory": {"workingSetBytes": 50_000_000 + i},
                "containers": [{"name": "web"}, {"name": "sidecar"}],
                "volume": [{"name": "data", "usedBytes": 1}],
            }
            for i in range(pods)
        ],
    }


@dataclass
class FakeKubelet:
    """An HTTPS kubelet on 127.0.0.1 serving ``/stats/summary`` to one bearer token.

    ``answer`` is ``200`` (the summary), or a status (401, 403, 500) to answer instead.
    """

    directory: Path
    node: str = "node-1"
    token: str = "kubelet-test-token"
    answer: int = 200
    pods: int = 20
    requests: int = 0
    port: int = 0
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def token_file(self) -> Path:
        return self.directory / "token"

    def start(self) -> FakeKubelet:
        self.directory.mkdir(parents=True, exist_ok=True)
        cert = make_serving_certificate(self.directory)
        self.token_file.write_text(self.token + "\n")
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kubelet.requests += 1
                status, body = kubelet._respond(self.path, self.headers.get("Authorization"))
                send_json(self, status, body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = cert.server_context().wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def _respond(self, path: str, authorization: str | None) -> tuple[int, Any]:
        if path != "/stats/summary":
            return 404, {"message": "not found"}
        if authorization != f"Bearer {self.token}" or self.answer == 401:
            return 401, {"message": "Unauthorized"}
        if self.answer == 403:
            return 403, {
                "kind": "Status",
                "message": 'nodes "node-1" is forbidden: User "system:serviceaccount:'
                'proxima-system:proxima-agent-node-agent" cannot get resource "nodes/stats"',
                "code": 403,
            }
        if self.answer != 200:
            return self.answer, {"message": "failing"}
        return 200, stats_summary(self.node, self.pods)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait_requests(self, n: int, timeout: float = 15) -> None:
        target = self.requests + n
        wait_for(lambda: self.requests >= target, timeout=timeout, what=f"{n} kubelet requests")
