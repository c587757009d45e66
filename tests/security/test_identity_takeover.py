"""Identity takeover by re-bind, tried as an attacker would: a real Console,
a real nats-server and real agent processes. Each attack must fail for the attacker."""

import time
import uuid
from datetime import UTC, datetime

import httpx

from contracts.enrollment import nats_credentials_message
from testkit.agents import fake_host_root
from testkit.console import QUIET_SECONDS, Identity
from testkit.waiting import wait_for

DMI = "4c4c4544-0037-3010-8031-b7c04f4e3332"


def _quiet(console, agent_id: str) -> None:
    wait_for(
        lambda: (console.agent(agent_id)["seconds_since_seen"] or 0) > QUIET_SECONDS + 0.2,
        what="the record quiet",
    )


def _real_host_agent(console, agents, tmp_path, name: str, token: str):
    """A host agent whose machine has a world-readable machine-id and a root-only DMI uuid."""
    machine_id = uuid.uuid4().hex
    root = fake_host_root(tmp_path / name, machine_id=machine_id, product_uuid=DMI)
    agent = agents(console, name, token, host_root=root)
    agent.wait_ready()
    return agent, machine_id


def test_machine_id_alone_cannot_rebind_a_record_holding_a_dmi_uuid(console, agents, tmp_path):
    """Without a release the strict rule holds however long the attacker retries; only
    release-identity (agents:write, refused while the agent is live) hands the name over."""
    token = console.install_token()
    real, machine_id = _real_host_agent(console, agents, tmp_path, "web-1", token)
    agent_id = real.agent_id()
    real.stop()
    _quiet(console, agent_id)

    # The attacker read /etc/machine-id (0444) but not the DMI uuid (root only).
    for _ in range(2):
        r = Identity(name="web-1", machine_id=machine_id).enroll(console, token)
        assert (r.status_code, r.json()["reason"]) == (409, "identity_mismatch")
        assert "product_uuid" in r.json()["message"]
    detail = console.agent(agent_id)
    assert detail["status"] != "released" and "rebound" not in detail["flags"]


def test_a_cluster_bound_token_cannot_rebind_a_host_record(console, agents, tmp_path):
    token = console.install_token()
    real, machine_id = _real_host_agent(console, agents, tmp_path, "web-2", token)
    agent_id = real.agent_id()
    real.stop()
    _quiet(console, agent_id)
    cluster_token = console.install_token(cluster_slug="prod-eu")
    # Even with every piece of evidence, the Helm chart's token never enrolls a host.
    attacker = Identity(name="web-2", machine_id=machine_id, product_uuid=DMI)
    r = attacker.enroll(console, cluster_token)
    assert (r.status_code, r.json()["reason"]) == (403, "install_token_scope")
    assert console.agent(agent_id)["history"][0]["kind"] == "enrolled"


def test_the_rotation_nonce_still_goes_to_the_real_agent_after_a_refused_takeover(
    console, agents, tmp_path
):
    token = console.install_token()
    real, machine_id = _real_host_agent(console, agents, tmp_path, "web-3", token)
    agent_id = real.agent_id()
    real.stop()
    _quiet(console, agent_id)
    assert Identity(name="web-3", machine_id=machine_id).enroll(console, token).status_code == 409
    real.start()
    real.wait_ready()
    wait_for(lambda: console.agent(agent_id)["status"] == "online", what="back online")
    key_before = real.state()["public_key"] if "public_key" in real.state() else None
    before = dict(real.state())
    with console.client() as c:
        r = c.post(f"/api/v1/fleet/agents/{agent_id}/rotate-credentials")
    assert r.status_code == 200, r.text
    wait_for(lambda: real.state() != before and not real.state().get("pending_seed"))
    if key_before is not None:
        assert real.state()["public_key"] != key_before


def test_after_a_rebind_the_displaced_agent_is_told_why_and_stops_retrying(
    console, agents, tmp_path
):
    """The machine legitimately moved (every kind of evidence presented): the old process, if
    it comes back, gets a clear refusal naming the re-bind instead of a silent retry loop."""
    token = console.install_token()
    old, machine_id = _real_host_agent(console, agents, tmp_path, "web-4", token)
    agent_id = old.agent_id()
    old.stop()
    _quiet(console, agent_id)
    moved = Identity(name="web-4", machine_id=machine_id, product_uuid=DMI)
    r = moved.enroll(console, token)
    assert (r.status_code, r.json()["agent_id"], r.json()["rebound"]) == (200, agent_id, True)
    detail = console.agent(agent_id)
    assert "rebound" in detail["flags"]
    assert detail["history"][0]["kind"] == "rebound"

    old.start()
    wait_for(lambda: "identity re-bound to another machine" in old.log(), timeout=30)
    assert "this agent's key was retired" in old.log()
    status, body = old.connectedz()
    assert status == 503 and "identity retired" in body
    attempts = old.log().count("identity re-bound to another machine")
    time.sleep(2)
    assert old.alive
    assert old.log().count("identity re-bound to another machine") == attempts, "no retry loop"


def test_the_displaced_key_is_refused_a_fresh_jwt(console):
    token = console.install_token()
    old = Identity(name="web-5", machine_id="m-5", product_uuid=DMI)
    agent_id = old.enroll(console, token).json()["agent_id"]
    _quiet(console, agent_id)
    assert (
        Identity(name="web-5", machine_id="m-5", product_uuid=DMI)
        .enroll(console, token)
        .status_code
        == 200
    )
    signed_at = datetime.now(UTC)
    body = {
        "public_key": old.public_key,
        "signed_at": signed_at.isoformat(),
        "signature": old.sign(
            nats_credentials_message(
                agent_id=agent_id, public_key=old.public_key, signed_at=signed_at
            )
        ),
    }
    r = httpx.post(f"{console.url}/api/v1/agents/{agent_id}/nats-credentials", json=body)
    assert (r.status_code, r.json()["reason"]) == (401, "identity_rebound")
    assert "identity re-bound to another machine at" in r.json()["message"]
