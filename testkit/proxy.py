"""A round-robin TCP load balancer in front of Console replicas, for the HA tests.

Each accepted connection goes to the next backend in turn (a connection, not a request: HTTP
keep-alive stays on one replica, as behind most layer-4 balancers). A backend that refuses the
connection is skipped for the next one, like a balancer's health check would; a connection cut
mid-request (the replica was killed) is cut for the client too. Runs its own event loop in a
thread, so synchronous tests can use it."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import Counter

from testkit.net import free_port


class RoundRobinProxy:
    def __init__(self, backends: list[tuple[str, int]], *, port: int | None = None) -> None:
        self.backends = list(backends)
        self.port = port or free_port()
        self.connections: Counter[int] = Counter()  # backend port -> connections it got
        self.refused = 0  # connections a backend refused (the next one took them)
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        first = next(self._turn)
        for i in range(len(self.backends)):
            host, port = self.backends[(first + i) % len(self.backends)]
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            except (OSError, TimeoutError):
                self.refused += 1
                continue
            self.connections[port] += 1
            return opened
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._open()
        if upstream is None:  # no replica answers: what a balancer does, a closed connection
            writer.close()
            return
        up_reader, up_writer = upstream
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass
