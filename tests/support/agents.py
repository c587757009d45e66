"""Real ``proxima-agent`` processes for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.support.waiting import wait_for


def fake_host_root(root: Path, *, machine_id: str | None, product_uuid: str | None = None) -> Path:
    """A directory laid out like a host's / as the DaemonSet's host-root mount shows it."""
    if machine_id is not None:
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "etc" / "machine-id").write_text(machine_id + "\n")
    if product_uuid is not None:
        dmi = root / "sys" / "class" / "dmi" / "id"
        dmi.mkdir(parents=True, exist_ok=True)
        (dmi / "product_uuid").write_text(product_uuid + "\n")
    root.mkdir(parents=True, exist_ok=True)
    return root


class AgentProcess:
    def __init__(
        self,
        *,
        name: str,
        data_dir: Path,
        backend_url: str,
        install_token: str,
        agent_type: str = "host",
        host_root: Path | None = None,
        heartbeat: str = "0.3s",
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.name = name
        self.data_dir = data_dir
        self.log_path = log_path or data_dir.parent / f"{data_dir.name}.log"
        self.env = {
            **os.environ,
            "PROXIMA_AGENT_TYPE": agent_type,
            "PROXIMA_AGENT_NAME": name,
            "PROXIMA_DATA_DIR": str(data_dir),
            "PROXIMA_BACKEND_URL": backend_url,
            "PROXIMA_INSTALL_TOKEN": install_token,
            "PROXIMA_HEARTBEAT_INTERVAL": heartbeat,
            "PROXIMA_METRICS_INTERVAL": "1s",
            "PROXIMA_HEALTH_PORT": "0",
            "PROXIMA_ENROLL_BACKOFF_MAX": "0.5s",
            "PROXIMA_LOG_LEVEL": "info",
        }
        if host_root is not None:
            self.env["PROXIMA_HOST_ROOT"] = str(host_root)
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        # The program: `python -m agent run` by default; a built zipapp (and a wrapper such as
        # `unshare -m …`) for self-update tests.
        self.command = command or [sys.executable, "-m", "agent", "run"]

    def start(self) -> AgentProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "health.port").unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def run_to_exit(self, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent", "run"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health_port(self) -> int:
        def port() -> int:
            text = (self.data_dir / "health.port").read_text().strip()
            return int(text)

        return int(wait_for(port, timeout=20, what=f"{self.name} health port"))

    def readyz(self) -> tuple[int, str]:
        r = httpx.get(f"http://127.0.0.1:{self.health_port()}/readyz", timeout=2)
        return r.status_code, r.text

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.readyz()[0] == 200, timeout=timeout, what=f"{self.name} ready")

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.data_dir / "state.json").read_text())
        return data

    def agent_id(self) -> str:
        return str(
            wait_for(
                lambda: (self.data_dir / "state.json").exists() and self.state()["agent_id"],
                timeout=30,
                what=f"{self.name} enrolled",
            )
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
