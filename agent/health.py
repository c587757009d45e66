"""``/livez``, ``/readyz`` and ``/connectedz`` over plain asyncio: no framework in the agent.

- ``/livez``: the process is alive and its loops come round (:class:`LoopWatch`). A loop that
  stopped coming round (wedged) fails it, so Kubernetes restarts the container.
- ``/readyz``: the agent is running and working: alive as above, its data directory usable, not
  stopping. It does **not** wait for enrollment or for the Console: a node whose enrollment is
  refused (HTTP 409 while its old record is within the quiet window) or a Console outage must not
  hold a DaemonSet rollout or mark the fleet unready. A refusal is reported elsewhere (the log,
  a Kubernetes Event on the pod, the Console's flag, the audit): see ``docs/kubernetes-agents.md``.
- ``/connectedz``: enrolled *and* connected to NATS, what ``/readyz`` meant before. The
  self-update trial waits on it, and so do the tests.

Anything but 200 answers 503 with one line saying why, so ``kubectl describe pod`` shows it.
A build under update trial serves the strict meaning on ``/readyz`` too (``strict_ready``): an
older build that starts it as its trial polls ``/readyz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from agent.errors import EnvironmentProblemError
from agent.files import write_atomic

__all__ = ["HEALTH_PORT_FILE", "HealthServer", "LoopWatch", "Readiness"]

log = logging.getLogger(__name__)

HEALTH_PORT_FILE = "health.port"
_READ_TIMEOUT = 5.0
_MAX_HEADER_BYTES = 8192


class LoopWatch:
    """A loop that must come round: it calls :meth:`beat` every round; it is *stalled* when no
    round came for ``grace`` seconds (set well above the loop's longest wait)."""

    def __init__(self, name: str, grace: float, clock: Callable[[], float]) -> None:
        self.name = name
        self.grace = grace
        self._clock = clock
        self.last = clock()

    def beat(self) -> None:
        self.last = self._clock()

    def stalled(self) -> str | None:
        idle = self._clock() - self.last
        if idle <= self.grace:
            return None
        return f"{self.name} loop stalled: no round for {idle:.0f} s (allowed {self.grace:g} s)"


class Readiness:
    """What the health endpoints report; updated by enrollment, the NATS session, the loops."""

    def __init__(
        self, data_dir: Path | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.data_dir = data_dir
        self.enrolled = False
        self.enrollment_problem: str | None = None
        self.nats_connected = False
        self.nats_problem: str | None = "nats not connected yet"
        self.stopping = False
        self._clock = clock
        self._watches: dict[str, LoopWatch] = {}

    def set_enrollment_problem(self, problem: str | None) -> None:
        self.enrollment_problem = problem

    def mark_enrolled(self) -> None:
        self.enrolled = True
        self.enrollment_problem = None

    def set_nats(self, connected: bool, problem: str | None = None) -> None:
        self.nats_connected = connected
        self.nats_problem = None if connected else (problem or "nats disconnected")

    def watch(self, name: str, grace: float) -> LoopWatch:
        """Register (or replace) the loop ``name``; it counts for liveness until :meth:`unwatch`."""
        self._watches[name] = LoopWatch(name, grace, self._clock)
        return self._watches[name]

    def unwatch(self, name: str) -> None:
        self._watches.pop(name, None)

    def liveness_reason(self) -> str | None:
        """``None`` while every watched loop comes round, else one line naming the first stalled."""
        for watch in self._watches.values():
            stalled = watch.stalled()
            if stalled is not None:
                return stalled
        return None

    def working_reason(self) -> str | None:
        """``None`` when the agent runs and works (``/readyz``), else one line saying why not."""
        if self.stopping:
            return "stopping"
        stalled = self.liveness_reason()
        if stalled is not None:
            return stalled
        if self.data_dir is not None:
            if not self.data_dir.is_dir():
                return f"data directory {self.data_dir} is gone"
            if not os.access(self.data_dir, os.W_OK | os.X_OK):
                return f"data directory {self.data_dir} is not writable"
        return None

    def connection_reason(self) -> str | None:
        """``None`` when enrolled and connected to NATS (``/connectedz``), else why not."""
        if not self.enrolled:
            return f"not enrolled: {self.enrollment_problem or 'enrolling'}"
        if not self.nats_connected:
            return self.nats_problem or "nats disconnected"
        return None


class HealthServer:
    def __init__(
        self,
        readiness: Readiness,
        host: str,
        port: int,
        data_dir: Path,
        *,
        port_file: str = HEALTH_PORT_FILE,
        strict_ready: bool = False,
    ) -> None:
        self.readiness = readiness
        self.strict_ready = strict_ready
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self._port_file = port_file
        self._server: asyncio.Server | None = None

    @property
    def port_file(self) -> Path:
        return self.data_dir / self._port_file

    async def start(self) -> int:
        """Bind, record the bound port in ``<data-dir>/health.port``, and return it."""
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as e:
            raise EnvironmentProblemError(
                f"health server cannot listen on {self.host}:{self.port}", e.strerror or str(e)
            ) from None
        bound = int(self._server.sockets[0].getsockname()[1])
        self.port = bound
        try:
            write_atomic(self.port_file, f"{bound}\n".encode(), mode=0o644)
        except OSError as e:
            log.warning("cannot write %s: %s", self.port_file, e)
        log.info(
            "health server listening on %s:%d (/livez, /readyz, /connectedz)", self.host, bound
        )
        return bound

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(OSError):
            self.port_file.unlink()

    def _answer(self, method: str, path: str) -> tuple[int, str]:
        if method not in ("GET", "HEAD"):
            return 405, "method not allowed"
        path = path.split("?", 1)[0]
        r = self.readiness
        checks = {
            "/livez": r.liveness_reason,
            "/readyz": r.connection_reason if self.strict_ready else r.working_reason,
            "/connectedz": r.connection_reason,
        }
        check = checks.get(path)
        if check is None:
            return 404, "not found"
        reason = check()
        return (200, "ok") if reason is None else (503, reason)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            writer.close()
            return
        try:
            if len(head) > _MAX_HEADER_BYTES:
                raise ValueError("headers too large")
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            status, text = self._answer(method, path)
        except ValueError:
            method, status, text = "GET", 400, "bad request"
        phrase = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            503: "Service Unavailable",
        }[status]
        body = (text + "\n").encode()
        response = (
            f"HTTP/1.1 {status} {phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n"
        ).encode()
        if method != "HEAD":
            response += body
        try:
            writer.write(response)
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
