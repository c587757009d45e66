"""Real ``proxima-agent`` processes: the one ``AgentProcess`` of the kit, and the agent's CLI."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from testkit import REPO
from testkit.waiting import CannotHappenError, wait_for

# What every test agent gets unless ``env`` says otherwise: quick beats and retries.
FAST_AGENT = {
    "PROXIMA_HEARTBEAT_INTERVAL": "0.3s",
    "PROXIMA_METRICS_INTERVAL": "1s",
    "PROXIMA_ENROLL_BACKOFF_MAX": "0.5s",
    "PROXIMA_LOG_LEVEL": "info",
}


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


def agent_env(**extra: str) -> dict[str, str]:
    """The test process's environment without its ``PROXIMA_*`` variables, the repository on
    ``PYTHONPATH``, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXIMA_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """``python -m agent <args>`` to its exit, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=REPO,
        env=env or agent_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def http_get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode().strip()
    finally:
        conn.close()


def _unused_log_path(data_dir: Path) -> Path:
    """``<data_dir>.log``, or ``<data_dir>-2.log`` … when another process logged there."""
    path = data_dir.parent / f"{data_dir.name}.log"
    n = 1
    while path.exists():
        n += 1
        path = data_dir.parent / f"{data_dir.name}-{n}.log"
    return path


class AgentProcess:
    """``python -m agent run --data-dir … --health-port 0 <args>`` (or ``python <program> run …``
    for a built zipapp; ``wrapper`` goes in front of the interpreter, e.g. ``unshare …``).

    Configured through the environment: :func:`agent_env`, then :data:`FAST_AGENT`, then the
    keyword settings given (``name``, ``backend_url``, ``install_token``, ``agent_type``,
    ``host_root``, ``heartbeat``), then ``env``. Its stdout and stderr go to ``log_path``
    (``<data_dir>.log`` beside the data directory, one file per ``AgentProcess``), kept
    across restarts. With
    ``restart_on_failure`` a non-zero exit starts the same command again, as systemd's
    ``Restart=on-failure`` would; ``exits`` lists every exit status seen.

    Nothing runs until :meth:`start`, which returns the process so that
    ``AgentProcess(...).start()`` reads as one step.
    """

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        name: str | None = None,
        backend_url: str | None = None,
        install_token: str | None = None,
        agent_type: str = "host",
        host_root: Path | None = None,
        heartbeat: str | None = None,
        env: dict[str, str] | None = None,
        program: Path | None = None,
        wrapper: list[str] | None = None,
        restart_on_failure: bool = False,
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.name = name or data_dir.name
        self.log_path = log_path or _unused_log_path(data_dir)
        start = [str(program)] if program is not None else ["-m", "agent"]
        self.argv = [
            *(wrapper or []),
            sys.executable,
            *start,
            "run",
            "--data-dir",
            str(data_dir),
            "--health-port",
            "0",
            *args,
        ]
        self.env = {**agent_env(), **FAST_AGENT, "PROXIMA_AGENT_TYPE": agent_type}
        if program is not None:
            self.env.pop("PYTHONPATH", None)  # a build brings its own packages
        settings = {
            "PROXIMA_AGENT_NAME": name,
            "PROXIMA_BACKEND_URL": backend_url,
            "PROXIMA_INSTALL_TOKEN": install_token,
            "PROXIMA_HOST_ROOT": str(host_root) if host_root is not None else None,
            "PROXIMA_HEARTBEAT_INTERVAL": heartbeat,
        }
        self.env.update({key: value for key, value in settings.items() if value is not None})
        self.env.update(env or {})
        self.restart_on_failure = restart_on_failure
        self.process: subprocess.Popen[bytes] | None = None
        self.exits: list[int] = []
        self._stopping = False
        self._watcher: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> AgentProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "health.port").unlink(missing_ok=True)
        self._stopping = False
        self.process = self._spawn()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        return self

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(
                self.argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def _watch(self) -> None:
        while True:
            process = self.process
            assert process is not None
            code = process.wait()
            self.exits.append(code)
            if self._stopping or not self.restart_on_failure or code == 0:
                return
            with open(self.log_path, "a") as log:
                log.write(f"[testkit] agent exited with {code}: restarting it\n")
            self.process = self._spawn()

    def run_to_exit(self, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """The same command in the foreground, to its exit, output captured: for a start that
        must fail."""
        return subprocess.run(
            self.argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Signal the agent, wait for its exit (kill it after ``timeout``), return its status."""
        self._stopping = True
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._watcher is not None:
            self._watcher.join(2)
        return process.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- what it says ---------------------------------------------------------------------------

    def log(self) -> str:
        """Everything the agent wrote (stdout and stderr), every run of it."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def lines(self) -> list[str]:
        return self.log().splitlines()

    def _exited(self) -> bool:
        return not self.restart_on_failure and not self.alive

    def wait_for_log(self, text: str, timeout: float = 15.0) -> str:
        """The first log line containing ``text``; fails at once if the agent exits first."""

        def found() -> str | None:
            exited = self._exited()  # before reading, so that a last line is not missed
            for line in self.lines():
                if text in line:
                    return line
            if exited:
                code = self.process.returncode if self.process else None
                raise CannotHappenError(f"agent exited ({code}) before logging {text!r}")
            return None

        try:
            return str(wait_for(found, timeout, f"agent log line containing {text!r}"))
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- agent log ---\n{self.log()}") from None

    # -- its health server ----------------------------------------------------------------------

    def health_port(self, timeout: float = 20.0) -> int:
        path = self.data_dir / "health.port"

        def read() -> int | None:
            if self._exited():
                raise CannotHappenError(f"{self.name} exited early:\n{self.log()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                return int(path.read_text())
            return None

        port = wait_for(read, timeout, f"{self.name} health port")
        assert port is not None  # wait_for returns a truthy value only
        return port

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` from the health server: (status, body stripped)."""
        return http_get(self.health_port(), path)

    def readyz(self) -> tuple[int, str]:
        """The pod's readiness: running and working (not "enrolled")."""
        return self.get("/readyz")

    def connectedz(self) -> tuple[int, str]:
        """Enrolled and connected to NATS, or 503 with why not."""
        return self.get("/connectedz")

    def wait_ready(self, timeout: float = 30) -> None:
        """Until enrolled and connected (``/connectedz``), what tests mean by "ready"."""
        wait_for(
            lambda: self.connectedz()[0] == 200, timeout, f"{self.name} enrolled and connected"
        )

    # -- its state file -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.data_dir / "state.json").read_text())
        return data

    def agent_id(self) -> str:
        return str(
            wait_for(
                lambda: (self.data_dir / "state.json").exists() and self.state()["agent_id"],
                30,
                f"{self.name} enrolled",
            )
        )
