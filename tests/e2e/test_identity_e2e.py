"""The chart page's identity rules with real agent processes, a real Console and a real
nats-server."""

import json
import stat
import uuid

from testkit.agents import fake_host_root
from testkit.console import QUIET_SECONDS
from testkit.waiting import wait_for

MID1, MID7, MIDR, MIDC, MIDO, MIDN = (uuid.uuid4().hex for _ in range(6))
OLD_DMI = "4c4c4544-0037-3010-8031-b7c04f4e3332"


def _online(console, agent_id):
    return console.agent(agent_id)["status"] == "online"


def test_a_fresh_agent_enrolls_heartbeats_and_keeps_its_id_across_restarts(
    e2e_console, agents, tmp_path
):
    token = e2e_console.install_token()
    a = agents(
        e2e_console, "host-1", token, host_root=fake_host_root(tmp_path / "h1", machine_id=MID1)
    )
    a.wait_ready()
    agent_id = a.agent_id()
    assert "enrolled" in a.log() and agent_id in a.log()
    assert "nats" in a.log()
    mode = stat.S_IMODE((a.data_dir / "state.json").stat().st_mode)
    assert mode == 0o600
    seed = a.state()["nkey_seed"] if "nkey_seed" in a.state() else None
    if seed:
        assert seed not in a.log()
    wait_for(lambda: _online(e2e_console, agent_id) and e2e_console.agent(agent_id)["version"])
    a.stop()
    a.start()
    a.wait_ready()
    assert a.agent_id() == agent_id
    # The page's check (`kubectl logs … | grep "enrolled"`) matches a start on an existing file.
    assert f"already enrolled as agent {agent_id}" in a.log()
    wait_for(lambda: e2e_console.agent(agent_id)["status"] == "online")
    assert [h["kind"] for h in e2e_console.agent(agent_id)["history"]] == ["enrolled"]


def test_a_name_clash_is_409_and_the_agent_stays_not_ready_and_keeps_retrying(e2e_console, agents):
    token = e2e_console.install_token()
    first = agents(e2e_console, "node-x", token, agent_type="k8s-node-monitor", data="a")
    first.wait_ready()
    holder = first.agent_id()
    second = agents(e2e_console, "node-x", token, agent_type="k8s-node-monitor", data="b")
    wait_for(
        lambda: "name_in_use" in second.connectedz()[1], what="not connected, with the 409 reason"
    )
    wait_for(
        lambda: (
            e2e_console.agent(holder)["conflict"]
            and e2e_console.agent(holder)["conflict"]["count"] >= 3
        ),
        what="retries",
    )
    assert second.connectedz()[0] == 503
    assert second.alive
    assert second.log().count("409") < e2e_console.agent(holder)["conflict"]["count"] + 2


def test_moving_the_data_dir_rebinds_onto_the_old_record_through_host_identity(
    e2e_console, agents, tmp_path
):
    """hostDataDir changed on a DaemonSet-only node: no operator action, no 409."""
    token = e2e_console.install_token()
    dmi = "4c4c4544-0037-3010-8031-b7c04f4e3332"
    host = fake_host_root(tmp_path / "node", machine_id=MID7, product_uuid=dmi)
    old = agents(
        e2e_console,
        "node-7",
        token,
        agent_type="k8s-node-monitor",
        host_root=host,
        data="var-lib-proxima-agent",
    )
    old.wait_ready()
    agent_id = old.agent_id()
    old.stop()
    wait_for(lambda: e2e_console.agent(agent_id)["seconds_since_seen"] > QUIET_SECONDS + 0.2)
    moved = agents(
        e2e_console,
        "node-7",
        token,
        agent_type="k8s-node-monitor",
        host_root=host,
        data="var-lib-proxima-node-agent",
    )
    moved.wait_ready()
    assert moved.agent_id() == agent_id
    assert "re-bound" in moved.log()
    assert e2e_console.agent(agent_id)["history"][0]["kind"] == "rebound"


def test_a_corrupt_state_file_is_set_aside_and_the_agent_rebinds_to_its_old_record(
    e2e_console, agents, tmp_path
):
    """No crash loop on a torn state.json: the file is kept aside and re-bind brings the record
    back because the machine's evidence matches."""
    token = e2e_console.install_token()
    host = fake_host_root(
        tmp_path / "node", machine_id=MIDC, product_uuid="0b3c2a1e-5d4f-4e6a-9b8c-7d6e5f4a3b2c"
    )
    a = agents(e2e_console, "node-c", token, agent_type="k8s-node-monitor", host_root=host)
    a.wait_ready()
    agent_id = a.agent_id()
    a.stop()
    original = (a.data_dir / "state.json").read_bytes()
    (a.data_dir / "state.json").write_bytes(original[: len(original) // 2])
    wait_for(lambda: e2e_console.agent(agent_id)["seconds_since_seen"] > QUIET_SECONDS + 0.2)
    a.start()
    a.wait_ready()
    assert a.agent_id() == agent_id
    assert "is corrupt" in a.log() and "re-bound" in a.log()
    asides = [p for p in a.data_dir.iterdir() if p.name.startswith("state.json.corrupt-")]
    assert [p.read_bytes() for p in asides] == [original[: len(original) // 2]]
    assert e2e_console.agent(agent_id)["history"][0]["kind"] == "rebound"


def test_without_host_identity_the_moved_agent_waits_until_release_then_rebinds(
    e2e_console, agents, tmp_path
):
    token = e2e_console.install_token()
    old = agents(
        e2e_console,
        "node-8",
        token,
        agent_type="k8s-node-monitor",
        host_root=fake_host_root(tmp_path / "empty-1", machine_id=None),
    )
    agent_id = old.agent_id()
    old.wait_ready()
    old.stop()
    moved = agents(
        e2e_console,
        "node-8",
        token,
        agent_type="k8s-node-monitor",
        data="moved",
        host_root=fake_host_root(tmp_path / "empty-2", machine_id=None),
    )
    wait_for(lambda: "no_identity_evidence" in moved.connectedz()[1], timeout=20)
    with e2e_console.client() as c:
        r = c.post(f"/api/v1/fleet/agents/{agent_id}/release-identity")
    assert r.status_code == 200, r.text
    moved.wait_ready()
    assert moved.agent_id() == agent_id


def test_after_release_an_agent_on_a_machine_with_other_evidence_rebinds_the_record(
    e2e_console, agents, tmp_path
):
    """A released record holding evidence was re-bound only by a machine presenting that
    evidence: an agent on a machine whose evidence changed (or a new machine taking over the
    name) kept getting 409 identity_mismatch after the release and never enrolled."""
    token = e2e_console.install_token()
    old = agents(
        e2e_console,
        "node-9",
        token,
        agent_type="k8s-node-monitor",
        host_root=fake_host_root(tmp_path / "old-machine", machine_id=MIDO, product_uuid=OLD_DMI),
        data="old",
    )
    old.wait_ready()
    agent_id = old.agent_id()
    old.stop()
    wait_for(lambda: e2e_console.agent(agent_id)["seconds_since_seen"] > QUIET_SECONDS + 0.2)

    new = agents(
        e2e_console,
        "node-9",
        token,
        agent_type="k8s-node-monitor",
        host_root=fake_host_root(tmp_path / "new-machine", machine_id=MIDN),
        data="new",
    )
    assert not (new.data_dir / "state.json").exists()
    # Without a release, the other machine is refused, and stays refused while it retries.
    wait_for(lambda: "identity_mismatch" in new.connectedz()[1], timeout=20)
    wait_for(lambda: (e2e_console.agent(agent_id)["conflict"] or {}).get("count", 0) >= 2)
    assert e2e_console.agent(agent_id)["status"] != "online"

    with e2e_console.client() as c:
        r = c.post(f"/api/v1/fleet/agents/{agent_id}/release-identity")
    assert r.status_code == 200, r.text
    new.wait_ready()
    assert new.agent_id() == agent_id, "the same record: id, links and history kept"
    wait_for(lambda: _online(e2e_console, agent_id))

    detail = e2e_console.agent(agent_id)
    kinds = [h["kind"] for h in detail["history"]]
    assert kinds[:2] == ["rebound", "released"] and kinds[-1] == "enrolled", kinds
    handed = detail["history"][0]["detail"]
    assert handed["how"] == "released" and handed["released_at"]
    assert handed["previous_evidence"] == ["machine_id", "product_uuid"]
    assert handed["presented_evidence"] == ["machine_id"]
    assert handed["evidence_differs"] == ["machine_id", "product_uuid"]
    assert {e["kind"] for e in detail["evidence"]} == {"machine_id"}, "the new machine's"
    line = next(
        ln
        for ln in e2e_console.log_path.read_text().splitlines()
        if "agent_rebound" in ln and agent_id in ln
    )
    assert "how=released" in line and "previous_evidence=machine_id,product_uuid" in line
    assert MIDO not in line and MIDN not in line, "evidence by kind, never by value"


def test_an_agent_type_mismatch_refuses_to_start_and_leaves_the_file(e2e_console, agents, tmp_path):
    token = e2e_console.install_token()
    host = agents(e2e_console, "shared", token, agent_type="host", data="shared-dir")
    host.wait_ready()
    host.stop()
    before = (host.data_dir / "state.json").read_bytes()
    pod = agents(
        e2e_console, "shared", token, agent_type="k8s-node-monitor", data="shared-dir", start=False
    )
    result = pod.run_to_exit()
    assert result.returncode != 0
    assert "host" in result.stderr and "k8s-node-monitor" in result.stderr
    assert str(host.data_dir / "state.json") in result.stderr
    assert (host.data_dir / "state.json").read_bytes() == before


def test_two_processes_on_one_data_dir_are_flagged_as_a_shared_identity(e2e_console, agents):
    token = e2e_console.install_token()
    one = agents(e2e_console, "dup", token, data="dup-dir")
    one.wait_ready()
    agent_id = one.agent_id()
    two = agents(e2e_console, "dup", token, data="dup-dir", env={"PROXIMA_HEALTH_PORT": "0"})
    wait_for(lambda: "shared_identity" in e2e_console.agent(agent_id)["flags"], timeout=20)
    assert two.alive


def test_rotate_credentials_gives_a_new_key_and_the_agent_carries_on(e2e_console, agents, tmp_path):
    token = e2e_console.install_token()
    a = agents(e2e_console, "rot", token, host_root=fake_host_root(tmp_path / "r", machine_id=MIDR))
    a.wait_ready()
    agent_id = a.agent_id()
    wait_for(lambda: _online(e2e_console, agent_id))
    before = json.dumps(a.state(), sort_keys=True)
    with e2e_console.client() as c:
        r = c.post(f"/api/v1/fleet/agents/{agent_id}/rotate-credentials")
    assert r.status_code == 200, r.text
    wait_for(
        lambda: (
            json.dumps(a.state(), sort_keys=True) != before and not a.state().get("pending_seed")
        ),
        what="state promoted",
    )
    a.wait_ready()
    seen = e2e_console.agent(agent_id)["last_seen_at"]
    wait_for(
        lambda: e2e_console.agent(agent_id)["last_seen_at"] != seen, what="heartbeat on new key"
    )
    detail = e2e_console.agent(agent_id)
    assert detail["credentials_rotated_at"]
    assert {e["kind"] for e in detail["evidence"]} == {"machine_id"}
    rotated = next(h for h in detail["history"] if h["kind"] == "credentials_rotated")
    assert rotated["detail"]["signals"] == ["machine_id"], "evidence renewed at rotation"


def test_rotation_of_an_offline_agent_is_refused(e2e_console, agents):
    token = e2e_console.install_token()
    a = agents(e2e_console, "rot-off", token)
    agent_id = a.agent_id()
    a.wait_ready()
    a.stop()
    wait_for(lambda: e2e_console.agent(agent_id)["status"] == "offline")
    with e2e_console.client() as c:
        r = c.post(f"/api/v1/fleet/agents/{agent_id}/rotate-credentials")
    assert (r.status_code, r.json()["reason"]) == (409, "agent_offline")


def test_revoke_cuts_the_agent_off_and_it_goes_not_ready(e2e_console, agents):
    token = e2e_console.install_token()
    a = agents(e2e_console, "rev", token)
    a.wait_ready()
    agent_id = a.agent_id()
    with e2e_console.client() as c:
        c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").raise_for_status()
    wait_for(lambda: a.connectedz()[0] == 503, what="not connected after revoke")
    assert "nats" in a.connectedz()[1].lower()
    # It keeps trying with its retired key: the server refuses it and the Console notices.
    view = wait_for(
        lambda: (v := e2e_console.agent(agent_id)) and v["refused_connections"] > 0 and v,
        timeout=20,
        what="refused connection attempts recorded",
    )
    assert "refused_still_connecting" in view["flags"]


def test_the_agent_reconnects_after_a_console_and_nats_restart_keeping_its_identity(
    e2e_console, agents
):
    token = e2e_console.install_token()
    a = agents(e2e_console, "survivor", token)
    a.wait_ready()
    agent_id = a.agent_id()
    e2e_console.stop()
    wait_for(lambda: a.connectedz()[0] == 503, what="not connected while NATS is down")
    e2e_console.start()
    a.wait_ready(timeout=40)
    assert a.agent_id() == agent_id
    seen = e2e_console.agent(agent_id)["last_seen_at"]
    wait_for(lambda: e2e_console.agent(agent_id)["last_seen_at"] != seen)
    assert "reconnect" in a.log().lower()


def test_a_refused_backend_connection_names_the_url_and_the_fix(agents, tmp_path):
    class Nowhere:
        url = "http://127.0.0.1:9"

    a = agents(Nowhere(), "lonely", "pxi_whatever")
    wait_for(lambda: "connection refused" in a.log(), timeout=20)
    line = next(ln for ln in a.log().splitlines() if "connection refused" in ln)
    assert "http://127.0.0.1:9" in line and "backendUrl" in line
    assert a.connectedz()[0] == 503
