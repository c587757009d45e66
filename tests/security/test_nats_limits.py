"""NATS limits: one agent's credentials cannot hold hundreds of connections or
thousands of subscriptions, an expired JWT is refused, and a live agent renews its JWT before
it expires without ever being refused. Real Console, real nats-server, real agents."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import httpx
import nats
import pytest

from console.nats.jwt import decode_claims
from contracts import subjects
from contracts.enrollment import nats_credentials_message
from testkit.console import QUIET_ENV, ConsoleProcess, Identity


def _enrolled(console: ConsoleProcess, name: str = "host-1") -> Identity:
    identity = Identity(name, machine_id=f"m-{name}")
    r = identity.enroll(console, console.install_token())
    assert r.status_code == 201, r.text
    return identity


async def _connect(console: ConsoleProcess, identity: Identity, errors: list[str]):
    async def error_cb(e: Exception) -> None:
        errors.append(str(e).lower())

    return await nats.connect(
        console.nats_url,
        allow_reconnect=False,
        max_reconnect_attempts=0,
        connect_timeout=5,
        error_cb=error_cb,
        **identity.nats_options(),
    )


def test_the_agent_jwt_carries_limits_and_an_expiry(console):
    identity = _enrolled(console)
    claims = decode_claims(identity.jwt or "")
    assert claims["nats"]["subs"] == 10
    assert claims["nats"]["payload"] == 1024 * 1024
    assert 0 < claims["exp"] - claims["iat"] <= 24 * 3600


async def test_ten_thousand_subscriptions_as_one_agent_are_refused(console):
    identity = _enrolled(console)
    agent_id = identity_id(console, identity)
    errors: list[str] = []
    nc = await _connect(console, identity, errors)
    held = 0
    try:
        for _ in range(10_000):
            await nc.subscribe(subjects.commands(agent_id))
            held += 1
            if held % 5 == 0:
                await nc.flush(timeout=5)
    except (nats.errors.Error, TimeoutError):
        pass  # the server closed the connection at the 11th
    finally:
        await _close(nc)
    refusal = " ".join([*errors, str(nc.last_error)]).lower()
    assert "maximum subscriptions exceeded" in refusal, refusal
    log = (console.data_dir / "nats" / "nats-server.log").read_text()
    assert "maximum subscriptions exceeded" in log, "the server refused, not the client"
    assert held < 100, f"{held} subscriptions sent before the server closed the connection"


async def _close(nc) -> None:
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception:
        pass


async def test_three_hundred_connections_as_one_agent_are_cut_to_the_limit(console):
    identity = _enrolled(console)
    clients = []
    try:
        for _ in range(300):
            try:
                clients.append(await _connect(console, identity, []))
            except Exception:  # the server may refuse while kicks are in flight
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            alive = [c for c in clients if c.is_connected]
            if len(alive) <= 3:
                break
            await asyncio.sleep(0.1)
        alive = [c for c in clients if c.is_connected]
        assert 1 <= len(alive) <= 3, f"{len(alive)} connections of one key still open"
    finally:
        for client in clients:
            if not client.is_closed:
                await _close(client)
    log = console.log_path.read_text()
    assert "past its limit of 3; closing it" in log


def identity_id(console: ConsoleProcess, identity: Identity) -> str:
    claims = decode_claims(identity.jwt or "")
    return str(claims["name"]).removeprefix("agent-")


@pytest.fixture
def short_jwt_console(console_factory) -> ConsoleProcess:
    return console_factory(
        env={**QUIET_ENV, "PROXIMA_NATS_AGENT_JWT_TTL_SECONDS": "6"},
    )


async def test_an_expired_jwt_is_refused(short_jwt_console):
    console = short_jwt_console
    identity = _enrolled(console)
    errors: list[str] = []
    nc = await _connect(console, identity, errors)
    assert nc.is_connected, "fresh: accepted"
    # nats-server closes the connection when its JWT expires...
    deadline = time.monotonic() + 15
    while nc.is_connected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not nc.is_connected, "the server closed the connection when the JWT expired"
    await _close(nc)
    # ...and refuses a new one with it (nats-py may hand back the client before the server's
    # -ERR arrives: then it is closed at once).
    try:
        again = await asyncio.wait_for(_connect(console, identity, errors), 10)
    except Exception as e:
        text = str(e)
    else:
        deadline = time.monotonic() + 5
        while again.is_connected and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not again.is_connected, "an expired JWT must not keep a connection"
        text = str(again.last_error)
        await _close(again)
    text = " ".join([text, *errors]).lower()
    assert "expired" in text or "authorization violation" in text or "eof" in text, text
    # The same key with a fresh JWT (what a renewing agent asks for) is accepted: it was the
    # expiry that was refused.
    identity.jwt = _renewed_jwt(console, identity)
    fresh = await _connect(console, identity, [])
    assert fresh.is_connected
    await _close(fresh)


def _renewed_jwt(console: ConsoleProcess, identity: Identity) -> str:
    agent_id = identity_id(console, identity)
    signed_at = datetime.now(UTC)
    message = nats_credentials_message(
        agent_id=agent_id, public_key=identity.public_key, signed_at=signed_at
    )
    r = httpx.post(
        f"{console.url}/api/v1/agents/{agent_id}/nats-credentials",
        json={
            "public_key": identity.public_key,
            "signed_at": signed_at.isoformat(),
            "signature": identity.sign(message),
        },
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["nats_jwt"])


def test_a_live_agent_renews_its_jwt_and_never_drops(short_jwt_console, agents):
    console = short_jwt_console
    agent = agents(console, "renewing", console.install_token())
    agent.wait_ready()
    agent_id = agent.agent_id()
    started = time.monotonic()
    # Three lifetimes of 6 s: the agent renews each time two thirds (4 s) have passed.
    while time.monotonic() - started < 18:
        assert console.agent(agent_id)["status"] == "online"
        time.sleep(1)
    log = agent.log()
    assert log.count("nats credentials renewed before expiry") >= 3, log
    assert "authorization refused" not in log.lower(), "never refused"
    assert "authentication expired" not in log.lower(), "never cut off by the server"
    assert "had expired or was about to" not in log, "renewed while live, not at reconnect"
