"""``/livez`` and ``/readyz`` over plain asyncio: no framework in the agent.

Ready means enrolled *and* connected to NATS. Anything else answers 503 with one line saying why,
so ``kubectl describe pod`` shows the reason the probe fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from agent.errors import EnvironmentProblemError
from agent.files import write_atomic

__all__ = ["HEALTH_PORT_FILE", "HealthServer", "Readiness"]

log = logging.getLogger(__name__)

HEALTH_PORT_FILE = "health.port"
_READ_TIMEOUT = 5.0
_MAX_HEADER_BYTES = 8192


class Readiness:
    """What the readiness probe reports; updated by enrollment and the NATS session."""

    def __init__(self) -> None:
        self.enrolled = False
        self.enrollment_problem: str | None = None
        self.nats_connected = False
        self.nats_problem: str | None = "nats not connected yet"

    def set_enrollment_problem(self, problem: str | None) -> None:
        self.enrollment_problem = problem

    def mark_enrolled(self) -> None:
        self.enrolled = True
        self.enrollment_problem = None

    def set_nats(self, connected: bool, problem: str | None = None) -> None:
        self.nats_connected = connected
        self.nats_problem = None if connected else (problem or "nats disconnected")

    def reason(self) -> str | None:
        """``None`` when ready, else one line saying why not."""
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
    ) -> None:
        self.readiness = readiness
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
        log.info("health server listening on %s:%d (/livez, /readyz)", self.host, bound)
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
        if path == "/livez":
            return 200, "ok"
        if path == "/readyz":
            reason = self.readiness.reason()
            return (200, "ok") if reason is None else (503, reason)
        return 404, "not found"

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
