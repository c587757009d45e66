"""A bare nats-server on a free loopback port, with nkey users for agents and a test user."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts import subjects
from testkit.net import free_port
from testkit.waiting import wait_for

NATS_SERVER = Path(sys.executable).with_name("nats-server")


@dataclass
class NatsServer:
    """A real nats-server on a free loopback port with nkey users for agents and a test user."""

    workdir: Path
    port: int = field(default_factory=free_port)
    agents: dict[str, str] = field(default_factory=dict)  # public key -> agent id
    process: subprocess.Popen[bytes] | None = None

    TEST_USER = "test"
    TEST_PASSWORD = "test-password"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / "nats.conf"

    @property
    def log_path(self) -> Path:
        return self.workdir / "nats.log"

    def _reloads(self) -> int:
        if not self.log_path.exists():
            return 0
        return self.log_path.read_text(errors="replace").count("Reloaded server configuration")

    def _write_config(self) -> None:
        users = [f'{{user: "{self.TEST_USER}", password: "{self.TEST_PASSWORD}"}}']
        for public, agent_id in self.agents.items():
            pub = json.dumps(subjects.agent_publish_allow(agent_id))
            sub = json.dumps(subjects.agent_subscribe_allow(agent_id))
            users.append(
                f'{{nkey: "{public}", permissions: {{publish: {{allow: {pub}}}, '
                f"subscribe: {{allow: {sub}}}}}}}"
            )
        text = (
            f"listen: 127.0.0.1:{self.port}\n"
            f"ports_file_dir: {json.dumps(str(self.workdir))}\n"
            f"log_file: {json.dumps(str(self.log_path))}\n"
            "authorization {\n  users = [\n    " + "\n    ".join(users) + "\n  ]\n}\n"
        )
        self.config_path.write_text(text)

    def allow(self, public_key: str, agent_id: str) -> None:
        self.agents[public_key] = agent_id

    def revoke(self, public_key: str) -> None:
        self.agents.pop(public_key, None)

    def start(self) -> None:
        """Start on ``port``; when another process took that free port first (the server then
        exits), pick another. Ready means *this* server wrote its ports file: a socket that
        answers on the port could belong to someone else."""
        for _attempt in range(5):
            self._write_config()
            self.process = subprocess.Popen(
                [str(NATS_SERVER), "-c", str(self.config_path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if wait_for(self._listening, 10, f"nats-server on port {self.port}") == "ours":
                return
            self.port = free_port()
        raise AssertionError("nats-server could not bind a free port in 5 attempts")

    def _listening(self) -> str | None:
        assert self.process is not None
        if self.process.poll() is not None:
            return "lost"  # the port was taken before it bound: try another
        ports = self.workdir / f"{NATS_SERVER.name}_{self.process.pid}.ports"
        return "ours" if ports.exists() else None

    def reload(self) -> None:
        """Apply the users now in ``agents``: the server cuts connections of removed keys.

        Returns once the server has applied it (its log says so): SIGHUP is asynchronous, and a
        connection made before the reload lands can be cut by it."""
        self._write_config()
        assert self.process is not None
        before = self._reloads()
        self.process.send_signal(signal.SIGHUP)
        wait_for(lambda: self._reloads() > before, 10, "nats-server to apply its reloaded config")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    async def connect(self) -> Any:
        import nats

        return await nats.connect(
            self.url,
            user=self.TEST_USER,
            password=self.TEST_PASSWORD,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
        )

    async def connect_as(self, state: Any, **options: Any) -> Any:
        """A connection holding an agent's key (``state``: an ``AgentState``), with its
        permissions: what that agent, or someone who stole its key, may do."""
        import nats

        return await nats.connect(
            self.url,
            nkeys_seed_str=state.seed.get_secret_value(),
            allow_reconnect=False,
            **options,
        )
