"""Cross-tenant lockout, tried as an attacker would: a real Console, a real
nats-server and real agents. Nothing one tenant does reaches another tenant's agents."""

import json
from datetime import UTC, datetime

import httpx
import nats
import pytest
from nats.errors import Error as NatsError

from console.nats.jwt import decode_claims
from contracts import subjects
from testkit.console import Identity
from testkit.waiting import await_for


async def _connect(console, ident: Identity):
    return await nats.connect(
        console.nats_url, **ident.nats_options(), allow_reconnect=False, connect_timeout=3
    )


def _tenant_b(console) -> tuple[str, str]:
    """Another client's admin API token and one of its install tokens."""
    admin = console.bootstrap(client="globex", environment="prod")["token"]
    with console.client(admin) as c:
        r = c.post("/api/v1/install-tokens", json={"name": "b"})
        r.raise_for_status()
        return admin, str(r.json()["token"])


def test_a_captured_enrollment_replayed_with_another_tenants_token_is_refused(console):
    token_a = console.install_token()
    _, token_b = _tenant_b(console)
    victim = Identity(name="web-1", machine_id="m-1")
    captured = victim.enroll_body(token_a)
    assert httpx.post(f"{console.url}/api/v1/agents/enroll", json=captured).status_code == 201
    replay = {**captured, "install_token": token_b}
    r = httpx.post(f"{console.url}/api/v1/agents/enroll", json=replay)
    assert (r.status_code, r.json()["reason"]) == (401, "bad_signature")
    # Nor may any identity field be changed under the captured signature.
    for field, value in (("name", "web-2"), ("version", "9.9.9"), ("instance_id", "x" * 32)):
        r = httpx.post(f"{console.url}/api/v1/agents/enroll", json={**captured, field: value})
        assert (r.status_code, r.json()["reason"]) == (401, "bad_signature"), field


def test_a_public_key_is_unique_across_tenants_even_signed_afresh(console):
    token_a = console.install_token()
    _, token_b = _tenant_b(console)
    ident = Identity(name="web-3", machine_id="m-3")
    assert ident.enroll(console, token_a).status_code == 201
    r = ident.enroll(console, token_b)  # the key holder itself, a valid signature for B's token
    assert (r.status_code, r.json()["reason"]) == (409, "public_key_in_use")


async def test_revoking_in_tenant_b_never_cuts_tenant_a(console):
    token_a = console.install_token()
    admin_b, token_b = _tenant_b(console)
    a = Identity(name="web-4", machine_id="m-4")
    a_id = a.enroll(console, token_a).json()["agent_id"]
    b = Identity(name="web-4", machine_id="m-4")
    b_id = b.enroll(console, token_b).json()["agent_id"]
    nc = await _connect(console, a)
    try:
        with console.client(admin_b) as c:
            assert c.post(f"/api/v1/fleet/agents/{b_id}/revoke").status_code == 200
            assert c.post(f"/api/v1/fleet/agents/{a_id}/revoke").status_code in (403, 404)
        sub = await nc.subscribe(subjects.commands(a_id))
        await nc.flush()
        assert console.agent(a_id)["status"] != "revoked"
        assert nc.is_connected
        await nc.publish(subjects.heartbeat(a_id), b"{}")
        await nc.flush()
        await sub.unsubscribe()
    finally:
        await nc.close()
    # And A's key still connects afresh.
    again = await _connect(console, a)
    assert again.is_connected
    await again.close()


async def test_a_revoked_key_never_enrolls_again_under_a_new_name(console):
    token = console.install_token()
    ident = Identity(name="web-5", machine_id="m-5")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    with console.client() as c:
        assert c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").status_code == 200
    renamed = Identity(name="web-5-new", machine_id="m-5", seed=ident.seed)
    r = renamed.enroll(console, token)
    assert (r.status_code, r.json()["reason"]) == (409, "public_key_retired")
    _, token_b = _tenant_b(console)
    r = renamed.enroll(console, token_b)
    assert (r.status_code, r.json()["reason"]) == (409, "public_key_retired")
    with pytest.raises((NatsError, OSError, TimeoutError)):
        nc = await _connect(console, ident)
        await nc.close()


async def test_tenant_b_agents_cannot_reach_tenant_a_subjects(console):
    token_a = console.install_token()
    _, token_b = _tenant_b(console)
    a_id = Identity(name="web-6", machine_id="m-6").enroll(console, token_a).json()["agent_id"]
    b = Identity(name="spy", machine_id="m-7")
    b_id = b.enroll(console, token_b).json()["agent_id"]
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await nats.connect(
        console.nats_url,
        **b.nats_options(),
        allow_reconnect=False,
        connect_timeout=3,
        error_cb=on_error,
    )
    try:
        await nc.subscribe(subjects.commands(a_id))
        await nc.publish(
            subjects.heartbeat(a_id),
            json.dumps({"agent_id": a_id, "sent_at": datetime.now(UTC).isoformat()}).encode(),
        )
        await nc.flush()
        await await_for(lambda: len(errors) >= 2, what="two permission violations")
        assert all("permissions violation" in str(e).lower() for e in errors)
        assert b_id != a_id
    finally:
        await nc.close()


def _heartbeat(agent_id: str, ident: Identity) -> bytes:
    return json.dumps(
        {
            "agent_id": agent_id,
            "instance_id": ident.instance_id,
            "agent_type": ident.agent_type,
            "version": "0.8.0",
            "sent_at": datetime.now(UTC).isoformat(),
            "uptime_seconds": 1.0,
            "heartbeat_interval_seconds": 0.5,
        }
    ).encode()


def _seen_at(console, admin: str, agent_id: str):
    with console.client(admin) as c:
        r = c.get(f"/api/v1/fleet/agents/{agent_id}")
        r.raise_for_status()
        return r.json()["last_seen_at"]


def _tenant_b_environment(console) -> tuple[str, str, str]:
    """Tenant B's admin token, install token and environment id."""
    info = console.bootstrap(client="globex", environment="prod")
    with console.client(info["token"]) as c:
        r = c.post("/api/v1/install-tokens", json={"name": "b"})
        r.raise_for_status()
        return info["token"], str(r.json()["token"]), info["environment_id"]


async def test_each_environment_is_its_own_nats_account_and_sees_nothing_of_another(console):
    """Even a user of B's account allowed every subject (more than any agent of B gets) sees
    none of A's traffic, and what it publishes under A's agent id never reaches A's record."""
    token_a = console.install_token()
    admin_b, token_b, env_b = _tenant_b_environment(console)
    a = Identity(name="web-8", machine_id="m-8")
    a_id = a.enroll(console, token_a).json()["agent_id"]
    b = Identity(name="web-8", machine_id="m-8b")
    b_id = b.enroll(console, token_b).json()["agent_id"]
    enrolled_at = console.agent(a_id)["last_seen_at"]
    b_enrolled_at = _seen_at(console, admin_b, b_id)
    issuer_a = decode_claims(a.jwt or "")["iss"]
    issuer_b = decode_claims(b.jwt or "")["iss"]
    assert issuer_a != issuer_b  # two accounts: the JWTs are signed by different keys

    spy = Identity(name="spy")
    spy.jwt = console.nats_user_jwt(spy.public_key, environment_id=env_b, pub=[">"], sub=[">"])
    spy_nc = await nats.connect(  # no_echo: it does not hear its own forgeries
        console.nats_url, **spy.nats_options(), allow_reconnect=False, no_echo=True
    )
    a_nc = await _connect(console, a)
    seen: list[str] = []

    async def on_any(msg) -> None:
        seen.append(msg.subject)

    try:
        await spy_nc.subscribe(">", cb=on_any)
        a_commands = await a_nc.subscribe(subjects.commands(a_id))
        await spy_nc.flush()
        # A's real traffic: a heartbeat the Console records; B's account sees none of it.
        await a_nc.publish(subjects.heartbeat(a_id), _heartbeat(a_id, a))
        await a_nc.flush()
        await await_for(
            lambda: console.agent(a_id)["last_seen_at"] != enrolled_at, what="A's heartbeat"
        )
        first_seen = console.agent(a_id)["last_seen_at"]
        # B's side forges A's subjects: a heartbeat and a command for A, then its own heartbeat.
        await spy_nc.publish(subjects.heartbeat(a_id), _heartbeat(a_id, a))
        await spy_nc.publish(subjects.commands(a_id), b'{"kind": "self_update"}')
        await spy_nc.publish(subjects.heartbeat(b_id), _heartbeat(b_id, b))
        await spy_nc.flush()
        await await_for(
            lambda: _seen_at(console, admin_b, b_id) != b_enrolled_at, what="B's own heartbeat"
        )
        assert console.agent(a_id)["last_seen_at"] == first_seen  # the forgery went nowhere
        with pytest.raises(TimeoutError):
            await a_commands.next_msg(timeout=0.5)  # nor did the forged command
        assert not [s for s in seen if a_id in s], seen  # B never saw anything of A
    finally:
        await spy_nc.close()
        await a_nc.close()


async def test_a_key_of_one_environment_cannot_use_another_environments_account(console):
    """A's key presenting a JWT signed by B's account (the best an attacker holding B's
    account key could do) does not speak for A: the Console hears B's account, finds A's
    record in another environment and drops the message."""
    token_a = console.install_token()
    admin_b, token_b, env_b = _tenant_b_environment(console)
    a = Identity(name="web-9", machine_id="m-9")
    a_id = a.enroll(console, token_a).json()["agent_id"]
    b = Identity(name="web-9", machine_id="m-9b")
    b_id = b.enroll(console, token_b).json()["agent_id"]
    enrolled_at = console.agent(a_id)["last_seen_at"]
    b_enrolled_at = _seen_at(console, admin_b, b_id)
    crossed = Identity(name="web-9", seed=a.seed, instance_id=a.instance_id)
    crossed.jwt = console.nats_user_jwt(
        a.public_key,
        environment_id=env_b,
        pub=subjects.agent_publish_allow(a_id),
        sub=subjects.agent_subscribe_allow(a_id),
    )
    crossed_nc = await _connect(console, crossed)
    b_nc = await _connect(console, b)
    try:
        await crossed_nc.publish(subjects.heartbeat(a_id), _heartbeat(a_id, a))
        await crossed_nc.flush()
        await b_nc.publish(subjects.heartbeat(b_id), _heartbeat(b_id, b))  # after it, in order
        await b_nc.flush()
        await await_for(
            lambda: _seen_at(console, admin_b, b_id) != b_enrolled_at, what="B's heartbeat"
        )
        assert console.agent(a_id)["last_seen_at"] == enrolled_at
    finally:
        await crossed_nc.close()
        await b_nc.close()


async def test_revoking_in_one_environment_pushes_only_that_environments_account(console):
    """A revocation changes B's account JWT only: A's agent keeps its connection, B's is cut."""
    token_a = console.install_token()
    admin_b, token_b, _ = _tenant_b_environment(console)
    a = Identity(name="web-10", machine_id="m-10")
    a.enroll(console, token_a)
    b = Identity(name="web-10", machine_id="m-10b")
    b_id = b.enroll(console, token_b).json()["agent_id"]
    a_nc = await _connect(console, a)
    closed: list[bool] = []

    async def on_closed() -> None:
        closed.append(True)

    b_nc = await nats.connect(
        console.nats_url,
        **b.nats_options(),
        allow_reconnect=False,
        connect_timeout=3,
        closed_cb=on_closed,
    )
    try:
        with console.client(admin_b) as c:
            assert c.post(f"/api/v1/fleet/agents/{b_id}/revoke").status_code == 200
        await await_for(lambda: closed, timeout=5, what="B's revoked agent cut")
        await a_nc.flush(timeout=2)
        assert a_nc.is_connected
    finally:
        await a_nc.close()
        await b_nc.close()
