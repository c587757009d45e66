"""A stand-in for the k8s-cluster-collector, built from what the onboarding page tells an operator.

The real cluster agent (agent/cluster/) is being written; until it lands, the collector is a real
enrolled identity that speaks the agent's wire format exactly as tests/console/test_clusters_api.py
does: it enrolls over HTTP with the page's install token, then publishes a leader heartbeat and a
chunked inventory over NATS with its own key.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
import threading
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import nats

from contracts import subjects
from contracts.inventory import InventorySnapshot, ObjectSummary, encode_chunks
from testkit.console import ConsoleProcess, Identity


def helm_sets(command: str) -> dict[str, str]:
    """``--set``/``--set-string`` values of a shell command, unescaped as Helm reads them."""
    words = shlex.split(command.replace("\\\n", " "))
    values: dict[str, str] = {}
    for flag, arg in itertools.pairwise(words):
        if flag in ("--set", "--set-string"):
            key, _, value = arg.partition("=")
            out, escaped = [], False
            for ch in value:
                if escaped or ch != "\\":
                    out.append(ch)
                    escaped = False
                else:
                    escaped = True
            values[key] = "".join(out)
    return values


def run_async(fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine on a thread of its own: Playwright's sync API owns this thread's loop."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(fn())  # type: ignore[arg-type]
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in box:
        raise box["error"]
    return box.get("value")


class SimulatedCollector:
    def __init__(self, console: ConsoleProcess, *, name: str, slug: str, cluster_name: str):
        self.console = console
        self.slug = slug
        self.cluster_name = cluster_name
        self.ident = Identity(name=name, agent_type="k8s-cluster-collector")
        self.agent_id = ""

    def enroll(self, install_token: str) -> str:
        r = self.ident.enroll(self.console, install_token)
        assert r.status_code == 201, r.text
        self.agent_id = r.json()["agent_id"]
        return self.agent_id

    def heartbeat(self, *, sync_interval: float) -> None:
        body = {
            "agent_id": self.agent_id,
            "instance_id": self.ident.instance_id,
            "agent_type": "k8s-cluster-collector",
            "version": "0.8.0",
            "sent_at": datetime.now(UTC).isoformat(),
            "uptime_seconds": 1,
            "heartbeat_interval_seconds": 30,
            "sync_interval_seconds": sync_interval,
            "leader": True,
            "cluster_slug": self.slug,
        }
        self._publish([(subjects.heartbeat(self.agent_id), json.dumps(body).encode())])

    def inventory(self, *, nodes: int, pods: int, sync_interval: float) -> int:
        snapshot = InventorySnapshot(
            cluster_slug=self.slug,
            cluster_name=self.cluster_name,
            collected_at=datetime.now(UTC),
            sync_interval_seconds=sync_interval,
            kubernetes_version="v1.31.4",
            counts={"nodes": nodes, "pods": pods, "namespaces": 4, "deployments": 12},
            objects={
                "pods": [
                    ObjectSummary(name=f"web-{i}", namespace="shop", status="Running")
                    for i in range(pods)
                ],
                "nodes": [ObjectSummary(name=f"node-{i}") for i in range(nodes)],
            },
        )
        chunks = encode_chunks(snapshot, uuid.uuid4().hex, max_payload=1024)
        self._publish([(subjects.inventory(self.agent_id), c) for c in chunks])
        return len(chunks)

    def _publish(self, messages: list[tuple[str, bytes]]) -> None:
        async def send() -> None:
            nc = await nats.connect(self.console.nats_url, **self.ident.nats_options())
            try:
                for subject, payload in messages:
                    await nc.publish(subject, payload)
                await nc.flush()
            finally:
                await nc.close()

        run_async(send)
