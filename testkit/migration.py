"""A small cluster for the hostdatadir-migration test, built from real parts.

Each node is a fake host root (``<tmp>/nodes/<node>/`` with ``etc/machine-id`` and
``sys/class/dmi/id/product_uuid``); its DaemonSet pod is a real ``k8s-node-monitor`` agent
process named after the node, whose data directory is the node root plus the DaemonSet's data
hostPath. The Kubernetes API double has no controllers, so a tiny :class:`Kubelet` watches the
DaemonSet (``KubeApiDouble.on_change``) and restarts every node's pod on the new directory when
its data hostPath changes, as the DaemonSet's rolling update would.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testkit import REPO
from testkit.agents import AgentProcess, fake_host_root
from testkit.chart import helm_path
from testkit.kube import KubeApiDouble, WatchEvent

CHART = REPO / "chart" / "proxima-agent"
RELEASE = "proxima-agent"
NAMESPACE = "proxima-system"
DAEMONSET = f"{RELEASE}-node-agent"
DEFAULT_DIR = "/var/lib/proxima-agent"
NODE_MONITOR = "k8s-node-monitor"


def helm_binary() -> str:
    """The real helm, extracted by scripts/tools.py."""
    return str(helm_path())


def data_path_of(daemonset: dict[str, Any]) -> str | None:
    for volume in daemonset["spec"]["template"]["spec"].get("volumes", []):
        if volume["name"] == "data" and volume.get("hostPath"):
            return str(volume["hostPath"]["path"])
    return None


@dataclass
class FakeNode:
    name: str
    root: Path
    machine_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    product_uuid: str = field(default_factory=lambda: str(uuid.uuid4()))

    def make_identity_readable(self) -> None:
        fake_host_root(self.root, machine_id=self.machine_id, product_uuid=self.product_uuid)

    def dir(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")


class Kubelet:
    """Runs the DaemonSet's pod on every node, and rolls them when its data hostPath moves."""

    def __init__(
        self,
        kube: KubeApiDouble,
        nodes: Iterable[FakeNode],
        *,
        backend_url: str,
        install_token: str,
        logs: Path,
    ) -> None:
        self.kube = kube
        self.nodes = {n.name: n for n in nodes}
        self.backend_url = backend_url
        self.install_token = install_token
        self.logs = logs
        self.pods: dict[str, AgentProcess] = {}
        self.host_path: str | None = None
        self.rollouts = 0
        self._wanted: str | None = None
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self._unsubscribe: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def start(self) -> Kubelet:
        self._thread.start()
        self._unsubscribe = self.kube.on_change(self._on_change)
        return self

    def _on_change(self, event: WatchEvent) -> None:
        # Runs in the writer's thread: only note the change, the worker thread acts on it.
        obj = event.object
        if event.resource.kind != "DaemonSet" or event.type == "DELETED":
            return
        if obj["metadata"]["name"] != DAEMONSET:
            return
        path = data_path_of(dict(obj))
        if path is not None and path != self._wanted:
            self._wanted = path
            self._queue.put(path)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            if path is None:
                return
            self._roll(path)

    def _roll(self, path: str) -> None:
        with self._lock:
            for name, node in sorted(self.nodes.items()):
                old = self.pods.pop(name, None)
                if old is not None:
                    old.stop()
                pod = AgentProcess(
                    name=name,
                    data_dir=node.dir(path),
                    backend_url=self.backend_url,
                    install_token=self.install_token,
                    agent_type=NODE_MONITOR,
                    host_root=node.root,
                    log_path=self.logs / f"{name}-pod-{self.rollouts}.log",
                )
                self.pods[name] = pod.start()
            self.host_path = path
            self.rollouts += 1

    def pids(self) -> dict[str, tuple[int | None, bool]]:
        with self._lock:
            return {
                name: (pod.process.pid if pod.process else None, pod.alive)
                for name, pod in self.pods.items()
            }

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._queue.put(None)
        self._thread.join(timeout=60)
        with self._lock:
            for pod in self.pods.values():
                pod.stop()


def chart_values(path: Path, *, backend_url: str) -> Path:
    """The values the release was installed with: node agent only, its default hostDataDir."""
    values = {
        "backendUrl": backend_url,
        "installToken": {"existingSecret": {"name": "proxima-install-token", "key": "token"}},
        "nodeAgent": {"hostDataDir": DEFAULT_DIR},
        "clusterAgent": {"enabled": False},
    }
    path.write_text(yaml.safe_dump(values))
    return path


def helm_template(helm: str, values: Path, home: Path, *sets: str) -> str:
    """``helm template`` of the chart, as ``helm install`` would have rendered it; ``sets`` are
    ``key=value`` overrides."""
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            helm,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--values",
            str(values),
            *(arg for kv in sets for arg in ("--set", kv)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )
    return done.stdout


def rendered_daemonset(rendering: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(rendering) if d and d["kind"] == "DaemonSet"]
    assert len(docs) == 1, docs
    return dict(docs[0])
