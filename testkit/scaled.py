"""The scaled deployment of ``deploy/scaled/`` on one machine, for the HA tests: a NATS cluster
whose every node runs ``deploy/scaled/nats-cluster.conf`` as it is (per-node values from the
environment, as the file says), and Console replicas started with exactly the settings
``deploy/scaled/console.env`` names. The docs (``docs/scaling.md``) and the tests share one
source: a setting the file adds that a test does not give, or the reverse, fails the test."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from testkit import REPO
from testkit.net import free_port
from testkit.waiting import wait_for

SCALED = REPO / "deploy" / "scaled"
NATS_SERVER = Path(sys.executable).with_name("nats-server")


def console_env_keys() -> list[str]:
    """The settings ``deploy/scaled/console.env`` gives every replica."""
    lines = (SCALED / "console.env").read_text().splitlines()
    return [ln.split("=", 1)[0] for ln in lines if ln.strip() and not ln.startswith("#")]


def scaled_console_env(values: dict[str, str]) -> dict[str, str]:
    """``values`` for exactly the settings of ``console.env`` (this machine's addresses)."""
    keys = console_env_keys()
    missing, extra = set(keys) - set(values), set(values) - set(keys)
    assert not missing and not extra, (
        f"deploy/scaled/console.env and the test disagree: the file sets {sorted(missing)} "
        f"the test does not, the test sets {sorted(extra)} the file does not"
    )
    return {k: values[k] for k in keys}


def nats_config(database_url: str, data_dir: Path) -> str:
    """``proxima-console nats-config``: the trust block every node includes."""
    done = subprocess.run(
        [sys.executable, "-m", "console", "nats-config"],
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PROXIMA_DATA_DIR": str(data_dir),
            "PROXIMA_DATABASE_URL": database_url,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


@dataclass
class NatsNode:
    name: str
    workdir: Path
    port: int = field(default_factory=free_port)
    route_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "nats.log"


class NatsCluster:
    """``size`` nodes on 127.0.0.1, each in its own directory holding a verbatim copy of
    ``deploy/scaled/nats-cluster.conf``, ``trust.conf`` beside it and its ``jwt/`` store."""

    def __init__(self, root: Path, trust: str, size: int = 3) -> None:
        self.nodes = [NatsNode(f"nats-{i}", root / f"nats-{i}") for i in range(size)]
        routes = ", ".join(f"nats-route://127.0.0.1:{n.route_port}" for n in self.nodes)
        self._routes = f"[{routes}]"
        for node in self.nodes:
            node.workdir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(SCALED / "nats-cluster.conf", node.workdir / "nats-cluster.conf")
            (node.workdir / "trust.conf").write_text(trust)

    @property
    def url(self) -> str:
        """Every node, comma-separated (``PROXIMA_NATS_URL``)."""
        return ",".join(n.url for n in self.nodes)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def _env(self, node: NatsNode) -> dict[str, str]:
        return {
            **os.environ,
            "NATS_SERVER_NAME": node.name,
            "NATS_LISTEN": f"127.0.0.1:{node.port}",
            "NATS_CLUSTER_LISTEN": f"127.0.0.1:{node.route_port}",
            "NATS_ROUTES": self._routes,
        }

    def start(self) -> NatsCluster:
        for i in range(len(self.nodes)):
            self.spawn(i)
        for i in range(len(self.nodes)):
            self.wait_ready(i)
        return self

    def spawn(self, i: int) -> None:
        node = self.nodes[i]
        ports = node.workdir / "ports"
        ports.mkdir(exist_ok=True)
        for stale in ports.glob("*.ports"):
            stale.unlink()
        node.process = subprocess.Popen(
            [str(NATS_SERVER), "-c", "nats-cluster.conf", "--ports_file_dir", str(ports),
             "-l", str(node.log_path)],
            cwd=node.workdir,
            env=self._env(node),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def wait_ready(self, i: int, timeout: float = 15) -> None:
        node = self.nodes[i]
        assert node.process is not None
        proc = node.process
        ports = node.workdir / "ports" / f"{NATS_SERVER.name}_{proc.pid}.ports"
        wait_for(
            lambda: proc.poll() is None and ports.exists(),
            timeout,
            f"nats node {node.name} listening",
        )

    def kill(self, i: int) -> None:
        """SIGKILL one node (its jwt/ store stays, as on a volume)."""
        node = self.nodes[i]
        assert node.process is not None
        node.process.send_signal(signal.SIGKILL)
        node.process.wait()
        node.process = None

    def restart(self, i: int) -> None:
        self.spawn(i)
        self.wait_ready(i)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
                try:
                    node.process.wait(10)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
            node.process = None
