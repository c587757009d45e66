"""release-identity, revoke and NATS permissions against a real Console and nats-server."""

import asyncio
import json
from datetime import UTC, datetime

import nats
import pytest
from nats.errors import Error as NatsError

from contracts import subjects
from testkit.console import QUIET_SECONDS, Identity
from testkit.waiting import await_for, wait_for


async def _connect(console, ident: Identity, **kw):
    return await nats.connect(
        console.nats_url,
        **ident.nats_options(),
        allow_reconnect=False,
        connect_timeout=3,
        **kw,
    )


def _heartbeat(
    agent_id: str, ident: Identity, version: str = "0.8.0", interval: float = 0.2
) -> bytes:
    return json.dumps(
        {
            "agent_id": agent_id,
            "instance_id": ident.instance_id,
            "agent_type": ident.agent_type,
            "version": version,
            "sent_at": datetime.now(UTC).isoformat(),
            "uptime_seconds": 1.0,
            "heartbeat_interval_seconds": interval,
        }
    ).encode()


def _release(console, agent_id, token=None):
    with console.client(token) as c:
        return c.post(f"/api/v1/fleet/agents/{agent_id}/release-identity")


def test_release_identity_permission_matrix(console, console_factory):
    token = console.install_token()
    reader = console.api_token(["agents:read"])
    writer = console.api_token(["agents:write"])
    other_env = console.bootstrap(client="acme", environment="staging")["token"]
    other_client = console.bootstrap(client="globex", environment="prod")["token"]
    # Enrolled last, and the in-window refusal asked first: the window is short (this fixture's
    # quiet window), and minting the tokens above takes seconds on a loaded machine.
    agent_id = Identity(name="r-1", machine_id="m").enroll(console, token).json()["agent_id"]
    r = _release(console, agent_id, writer)
    assert (r.status_code, r.json()["reason"]) == (409, "agent_recently_seen")
    assert "quiet window" in r.json()["message"]

    import httpx

    r = httpx.post(f"{console.url}/api/v1/fleet/agents/{agent_id}/release-identity")
    assert (r.status_code, r.json()["reason"]) == (401, "missing_token")
    r = _release(console, agent_id, "pxa_unknown")
    assert (r.status_code, r.json()["reason"]) == (401, "invalid_token")
    r = _release(console, agent_id, reader)
    assert (r.status_code, r.json()["reason"]) == (403, "missing_scope")
    for wrong in (other_env, other_client):
        r = _release(console, agent_id, wrong)
        assert (r.status_code, r.json()["reason"]) == (403, "wrong_environment")


def test_release_refuses_a_revoked_agent(console):
    token = console.install_token()
    agent_id = Identity(name="r-2").enroll(console, token).json()["agent_id"]
    with console.client() as c:
        c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").raise_for_status()
    r = _release(console, agent_id)
    assert (r.status_code, r.json()["reason"]) == (409, "agent_revoked")


def test_a_released_record_is_rebound_by_the_next_enrollment_keeping_its_id(console):
    """The chart page's manual path: no evidence on the record, so release first."""
    token = console.install_token()
    agent_id = Identity(name="r-3").enroll(console, token).json()["agent_id"]
    wait_for(lambda: (console.agent(agent_id)["seconds_since_seen"] or 0) > QUIET_SECONDS + 0.2)
    assert Identity(name="r-3").enroll(console, token).json()["reason"] == "no_identity_evidence"
    r = _release(console, agent_id)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "released"
    again = Identity(name="r-3", machine_id="m-new").enroll(console, token)
    assert (again.status_code, again.json()["agent_id"], again.json()["rebound"]) == (
        200,
        agent_id,
        True,
    )
    history = [h["kind"] for h in console.agent(agent_id)["history"]]
    assert history[:3] == ["rebound", "released", "enrollment_conflict"]
    assert "enrollment_conflict" not in console.agent(agent_id)["flags"]


async def test_an_agent_publishes_only_under_its_own_prefix_and_reads_only_its_commands(console):
    token = console.install_token()
    a, b = Identity(name="p-a"), Identity(name="p-b")
    a_id = a.enroll(console, token).json()["agent_id"]
    b_id = b.enroll(console, token).json()["agent_id"]
    errors: list[Exception] = []

    async def on_error(e):
        errors.append(e)

    nc = await _connect(console, a, error_cb=on_error)
    try:
        await nc.publish(subjects.heartbeat(a_id), _heartbeat(a_id, a))
        await nc.publish(subjects.heartbeat(b_id), _heartbeat(b_id, a))
        await nc.flush()
        await await_for(lambda: _has(errors, "publish"), timeout=5, what="publish violation")
        await nc.subscribe(subjects.commands(b_id))
        await await_for(lambda: _has(errors, "subscription"), timeout=5, what="subscribe violation")
        await nc.subscribe(subjects.commands(a_id))
        await nc.flush()
    finally:
        await nc.close()
    wait_for(lambda: console.agent(a_id)["version"] == "0.8.0", what="own heartbeat ingested")
    assert console.agent(b_id)["history"][0]["kind"] == "enrolled"


async def _has(errors, word):
    return any(word in str(e).lower() for e in errors)


async def test_an_unknown_key_cannot_connect(console):
    with pytest.raises(NatsError):
        await _connect(console, Identity(name="stranger"))


async def test_revoke_cuts_the_live_connection_and_the_key_is_refused_after(console):
    token = console.install_token()
    ident = Identity(name="v-1")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    closed = asyncio.Event()

    async def on_closed():
        closed.set()

    nc = await _connect(console, ident, closed_cb=on_closed)
    assert nc.is_connected
    with console.client() as c:
        assert c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").json()["status"] == "revoked"
    await asyncio.wait_for(closed.wait(), 10)
    assert nc.is_closed
    with pytest.raises(NatsError):
        await _connect(console, ident)


async def test_heartbeats_keep_a_record_from_rebinding_or_release(console):
    """A second live process is refused by design, however long the window."""
    token = console.install_token()
    ident = Identity(name="h-1", machine_id="m-h")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    nc = await _connect(console, ident)
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + QUIET_SECONDS * 2
        while loop.time() < end:
            await nc.publish(subjects.heartbeat(agent_id), _heartbeat(agent_id, ident))
            await nc.flush()
            await asyncio.sleep(0.2)
        r = Identity(name="h-1", machine_id="m-h").enroll(console, token)
        assert (r.status_code, r.json()["reason"]) == (409, "name_in_use")
        assert _release(console, agent_id).json()["reason"] == "agent_recently_seen"
    finally:
        await nc.close()


async def test_two_processes_on_one_identity_are_flagged_as_shared_with_version_flapping(console):
    token = console.install_token()
    one = Identity(name="s-1")
    agent_id = one.enroll(console, token).json()["agent_id"]
    two = Identity(name="s-1", seed=one.seed, jwt=one.jwt)  # same state file, another process
    nc1, nc2 = await _connect(console, one), await _connect(console, two)
    try:
        for _ in range(4):
            await nc1.publish(subjects.heartbeat(agent_id), _heartbeat(agent_id, one, "0.8.0"))
            await nc1.flush()
            await asyncio.sleep(0.06)
            await nc2.publish(subjects.heartbeat(agent_id), _heartbeat(agent_id, two, "0.7.1"))
            await nc2.flush()
            await asyncio.sleep(0.06)
        view = wait_for(
            lambda: (v := console.agent(agent_id)) and "version_flapping" in v["flags"] and v,
            timeout=5,
            what="shared identity flag",
        )
        assert "shared_identity" in view["flags"]
        assert {"shared_identity", "version_flapping"} <= {h["kind"] for h in view["history"]}
    finally:
        await nc1.close()
        await nc2.close()


async def test_a_restart_with_a_new_instance_id_is_not_a_shared_identity(console):
    token = console.install_token()
    first = Identity(name="s-2")
    agent_id = first.enroll(console, token).json()["agent_id"]
    second = Identity(name="s-2", seed=first.seed, jwt=first.jwt)
    nc = await _connect(console, first)
    try:
        for ident in (first, first, second, second, second):
            await nc.publish(subjects.heartbeat(agent_id), _heartbeat(agent_id, ident))
            await nc.flush()
            await asyncio.sleep(0.08)
        wait_for(
            lambda: console.agent(agent_id)["instance_id"] == second.instance_id,
            what="the restarted process's heartbeats ingested",
        )
    finally:
        await nc.close()
    assert "shared_identity" not in console.agent(agent_id)["flags"]


async def test_a_jwt_not_signed_by_the_fleet_account_is_refused(console):
    """The server trusts the signature chain, not the claims: a forged '>' grant fails."""
    import os as _os

    import nkeys

    from console.nats.jwt import encode_jwt

    ident = Identity(name="forger")
    rogue = nkeys.from_seed(nkeys.encode_seed(_os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT))
    ident.jwt = encode_jwt(
        {
            "sub": ident.public_key,
            "name": "x",
            "nats": {
                "pub": {"allow": [">"]},
                "sub": {"allow": [">"]},
                "type": "user",
                "version": 2,
            },
        },
        rogue,
    )
    with pytest.raises(NatsError):
        await _connect(console, ident)


async def test_a_rebind_retires_the_previous_key(console):
    token = console.install_token()
    old = Identity(name="rb-1", machine_id="m-rb")
    agent_id = old.enroll(console, token).json()["agent_id"]
    nc = await _connect(console, old)
    await nc.close()
    wait_for(lambda: (console.agent(agent_id)["seconds_since_seen"] or 0) > QUIET_SECONDS + 0.2)
    new = Identity(name="rb-1", machine_id="m-rb")
    assert new.enroll(console, token).json()["agent_id"] == agent_id
    with pytest.raises(NatsError):
        await _connect(console, old)
    nc = await _connect(console, new)
    await nc.close()


def _refresh(console, agent_id, ident, signed_at=None, signer=None):
    from contracts.enrollment import nats_credentials_message

    signed_at = signed_at or datetime.now(UTC)
    msg = nats_credentials_message(
        agent_id=agent_id, public_key=ident.public_key, signed_at=signed_at
    )
    import httpx

    return httpx.post(
        f"{console.url}/api/v1/agents/{agent_id}/nats-credentials",
        json={
            "public_key": ident.public_key,
            "signed_at": signed_at.isoformat(),
            "signature": (signer or ident).sign(msg),
        },
    )


async def test_an_agent_can_fetch_a_fresh_jwt_for_its_current_key_only(console):
    token = console.install_token()
    ident = Identity(name="jwt-1")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    r = _refresh(console, agent_id, ident)
    assert r.status_code == 200, r.text
    ident.jwt = r.json()["nats_jwt"]
    nc = await _connect(console, ident)
    await nc.close()
    stranger = Identity(name="jwt-1")
    assert _refresh(console, agent_id, stranger).json()["reason"] == "not_current_key"
    with console.client() as c:
        c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").raise_for_status()
    assert _refresh(console, agent_id, ident).status_code == 401


def test_a_stale_or_forged_jwt_request_is_an_authentication_failure_as_at_enrollment(console):
    """The freshness and signature check of ``nats-credentials`` was a copy of enrollment's that
    answered a stale request 400 and a forged one 401; both use one check, and both are 401."""
    token = console.install_token()
    ident = Identity(name="jwt-2")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    stale = _refresh(console, agent_id, ident, signed_at=datetime(2020, 1, 1, tzinfo=UTC))
    assert (stale.status_code, stale.json()["reason"]) == (401, "stale_signature")
    forged = _refresh(console, agent_id, ident, signer=Identity(name="jwt-2"))
    assert (forged.status_code, forged.json()["reason"]) == (401, "bad_signature")
