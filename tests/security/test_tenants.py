"""Cross-tenant lockout (issue 11, Medium 4), tried as an attacker would: a real Console, a real
nats-server and real agents. Nothing one tenant does reaches another tenant's agents."""

import json
from datetime import UTC, datetime

import httpx
import nats
import pytest
from nats.errors import Error as NatsError

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
    assert (r.status_code, r.json()["reason"]) == (400, "bad_signature")
    # Nor may any identity field be changed under the captured signature.
    for field, value in (("name", "web-2"), ("version", "9.9.9"), ("instance_id", "x" * 32)):
        r = httpx.post(f"{console.url}/api/v1/agents/enroll", json={**captured, field: value})
        assert (r.status_code, r.json()["reason"]) == (400, "bad_signature"), field


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
