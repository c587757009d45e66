"""The health server: /livez while the loops come round, /readyz while the agent works (never
waiting for enrollment or the Console), /connectedz only when enrolled and connected."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.errors import EnvironmentProblemError
from agent.health import HealthServer, Readiness


async def get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode().strip()


async def test_connectedz_follows_enrollment_and_nats_and_readyz_does_not(
    tmp_path: Path,
) -> None:
    readiness = Readiness(tmp_path)
    server = HealthServer(readiness, "127.0.0.1", 0, tmp_path)
    port = await server.start()
    try:
        assert (tmp_path / "health.port").read_text().strip() == str(port)
        assert await get(port, "/livez") == (200, "ok")
        assert await get(port, "/readyz") == (200, "ok")
        assert await get(port, "/connectedz") == (503, "not enrolled: enrolling")
        readiness.set_enrollment_problem("409 name_in_use")
        # A refused enrollment does not make the pod unready: it is told elsewhere.
        assert await get(port, "/readyz") == (200, "ok")
        assert await get(port, "/connectedz") == (503, "not enrolled: 409 name_in_use")
        readiness.mark_enrolled()
        assert await get(port, "/connectedz") == (503, "nats not connected yet")
        readiness.set_nats(True)
        assert await get(port, "/connectedz") == (200, "ok")
        readiness.set_nats(False, "nats disconnected: unexpected EOF")
        # Nor does a Console/NATS outage.
        assert await get(port, "/readyz") == (200, "ok")
        assert await get(port, "/connectedz") == (503, "nats disconnected: unexpected EOF")
        assert (await get(port, "/nope"))[0] == 404
        assert (await get(port, "/readyz", "POST"))[0] == 405
        assert await get(port, "/livez", "HEAD") == (200, "")
        readiness.stopping = True
        assert await get(port, "/readyz") == (503, "stopping")
    finally:
        await server.close()
    assert not (tmp_path / "health.port").exists()


async def test_a_trial_builds_readyz_is_strict(tmp_path: Path) -> None:
    """An older build polls its trial child's /readyz: there it still means connected."""
    readiness = Readiness(tmp_path)
    server = HealthServer(readiness, "127.0.0.1", 0, tmp_path, strict_ready=True)
    port = await server.start()
    try:
        readiness.mark_enrolled()
        assert await get(port, "/readyz") == (503, "nats not connected yet")
        readiness.set_nats(True)
        assert await get(port, "/readyz") == (200, "ok")
    finally:
        await server.close()


async def test_a_stalled_loop_fails_liveness_and_readiness(tmp_path: Path) -> None:
    now = [100.0]
    readiness = Readiness(tmp_path, clock=lambda: now[0])
    watch = readiness.watch("heartbeat", 90)
    server = HealthServer(readiness, "127.0.0.1", 0, tmp_path)
    port = await server.start()
    try:
        now[0] += 89
        assert await get(port, "/livez") == (200, "ok")
        now[0] += 2
        stalled = "heartbeat loop stalled: no round for 91 s (allowed 90 s)"
        assert await get(port, "/livez") == (503, stalled)
        assert await get(port, "/readyz") == (503, stalled)
        watch.beat()
        assert await get(port, "/livez") == (200, "ok")
        readiness.unwatch("heartbeat")
        now[0] += 1000
        assert await get(port, "/livez") == (200, "ok")
    finally:
        await server.close()


async def test_an_unusable_data_directory_is_not_ready(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    readiness = Readiness(data)
    server = HealthServer(readiness, "127.0.0.1", 0, tmp_path)
    port = await server.start()
    try:
        assert await get(port, "/readyz") == (200, "ok")
        data.rmdir()
        assert await get(port, "/readyz") == (503, f"data directory {data} is gone")
        assert await get(port, "/livez") == (200, "ok")
    finally:
        await server.close()


async def test_garbage_requests_do_not_break_the_server(tmp_path: Path) -> None:
    server = HealthServer(Readiness(), "127.0.0.1", 0, tmp_path)
    port = await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x00\x01garbage\r\n\r\n")
        await writer.drain()
        assert (await reader.read()).startswith(b"HTTP/1.1 400")
        writer.close()
        assert await get(port, "/livez") == (200, "ok")
    finally:
        await server.close()


async def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    first = HealthServer(Readiness(), "127.0.0.1", 0, tmp_path)
    port = await first.start()
    try:
        with pytest.raises(EnvironmentProblemError, match=f"127.0.0.1:{port}"):
            await HealthServer(Readiness(), "127.0.0.1", port, tmp_path / "x").start()
    finally:
        await first.close()
