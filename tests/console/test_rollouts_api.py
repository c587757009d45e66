"""Rollouts in the Console with simulated agents on real NATS connections (no Prefect here:
tests/flows drives the same through the flow)."""

import pytest

from testkit.rollouts import ARTIFACT, create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for


def _create(console, **over):
    return create_rollout(console, "r", **over)


def _post(console, path, **kw):
    with console.client() as c:
        return c.post(f"/api/v1/fleet/rollouts{path}", **kw)


def _get(console, rid):
    with console.client() as c:
        return c.get(f"/api/v1/fleet/rollouts/{rid}").json()


@pytest.fixture
def swarm(console):
    def make(count, **kw):
        s = Swarm(console, count, **kw).start()
        made.append(s)
        wait_for(
            lambda: all(
                a["status"] == "online"
                for a in console.client()
                .get("/api/v1/fleet/agents", params={"limit": 1000})
                .json()["items"]
            ),
            what="swarm online",
        )
        return s

    made = []
    yield make
    for s in made:
        s.stop()


def test_a_rollout_plans_waves_and_sends_each_agent_one_command(console, swarm):
    s = swarm(6)
    r = _create(console, start_flow=True)
    assert [w["size"] for w in r["waves"]] == [1, 2, 3]
    assert r["state"] == "pending" and "PROXIMA_PREFECT_API_URL" in r["state_reason"]
    assert _post(console, f"/{r['id']}/waves/0/dispatch").json()["refused"] == "rollout is pending"
    assert _post(console, f"/{r['id']}/start", json={}).json()["state"] == "running"
    for wave in range(3):
        first = _post(console, f"/{r['id']}/waves/{wave}/dispatch").json()
        again = _post(console, f"/{r['id']}/waves/{wave}/dispatch").json()
        assert (again["sent"], again["already_sent"]) == (0, first["sent"])
        wait_for(lambda w=wave: _get(console, r["id"])["waves"][w]["done"], what=f"wave {wave}")
    assert _post(console, f"/{r['id']}/complete").json()["state"] == "succeeded"
    done = _get(console, r["id"])
    assert done["counts"]["succeeded"] == 6
    assert len(done["targets"]) == 6
    assert all(t["new_version"] == "0.9.0" for t in done["targets"])
    assert set(s.received_by().values()) == {1}


def test_crossing_the_threshold_stalls_and_no_later_wave_receives_anything(console, swarm):
    def fail_some(name, cmd):
        if not name.endswith(("0", "1")):  # 6 of 8 fail: any canary of 4 holds >= 2
            return (
                "failed",
                "backup current binary: rename /usr/local/bin/proxima-agent "
                "/usr/local/bin/proxima-agent.bak: read-only file system",
                None,
            )
        return "succeeded", None, cmd["args"]["version"]

    s = swarm(8, behaviour=fail_some)
    r = _create(
        console,
        waves={"canary_size": 4, "percentages": [100]},
        criteria=[{"failure_type": "failed", "threshold_count": 2, "min_executed": 1}],
    )
    _post(console, f"/{r['id']}/start", json={})
    _post(console, f"/{r['id']}/waves/0/dispatch")
    wait_for(lambda: _get(console, r["id"])["state"] == "stalled", what="stall")
    stalled = _get(console, r["id"])
    assert stalled["threshold"]["failures"] == 2
    assert "read-only file system" in next(t["error"] for t in stalled["targets"] if t["error"])
    refused = _post(console, f"/{r['id']}/waves/1/dispatch").json()
    assert refused["sent"] == 0 and refused["refused"] == "rollout is stalled"
    later = {t["agent_name"] for t in stalled["targets"] if t["wave"] == 1}
    assert later, "no later wave to hold back"
    assert all(s.received_by()[n] == 0 for n in later)
    resumed = _post(console, f"/{r['id']}/resume").json()
    assert resumed["state"] == "running"
    wait_for(lambda: _get(console, r["id"])["waves"][0]["done"])
    _post(console, f"/{r['id']}/waves/1/dispatch")
    wait_for(
        lambda: (
            _get(console, r["id"])["waves"][1]["done"]
            or _get(console, r["id"])["state"] != "running"
        )
    )
    aborted = _post(console, f"/{r['id']}/abort", json={"reason": "enough"}).json()
    assert aborted["state"] == "aborted" and aborted["state_reason"] == "enough"
    assert _post(console, f"/{r['id']}/resume").json()["reason"] == "illegal_transition"


def test_a_missing_result_becomes_timed_out_after_the_wave_timeout(console, swarm):
    swarm(2, behaviour=lambda name, cmd: ("silent", None, None))
    r = _create(
        console,
        wave_timeout_seconds=1,
        waves={"canary_size": 2, "percentages": [100]},
        criteria=[
            {
                "failure_type": "timed_out",
                "threshold_percent": 100,
                "min_executed": 2,
                "action": "abort",
            }
        ],
    )
    _post(console, f"/{r['id']}/start", json={})
    _post(console, f"/{r['id']}/waves/0/dispatch")
    # A read may see the abort before the targets it stands on (targets are read first, then
    # the state): wait for both.
    final = wait_for(
        lambda: (
            (x := _get(console, r["id"]))["state"] == "aborted"
            and x["counts"]["timed_out"] == 2
            and x
        ),
        what="abort on timeouts",
    )
    assert final["counts"]["timed_out"] == 2
    assert final["threshold"]["action"] == "abort"


def test_agents_that_cannot_self_update_or_share_an_identity_are_excluded_up_front(console, swarm):
    swarm(2)
    from testkit.console import Identity

    token = console.install_token()
    ro = Identity(name="readonly-host")
    assert ro.enroll(console, token, can_self_update=False).status_code == 201
    pod = Identity(name="node-1", agent_type="k8s-node-monitor")
    assert pod.enroll(console, token).status_code == 201
    r = _create(console)
    reasons = {e["agent_name"]: e["reason"] for e in r["exclusions"]}
    assert reasons == {"readonly-host": "cannot_self_update", "node-1": "cannot_self_update"}
    assert sum(w["size"] for w in r["waves"]) == 2


def test_rollouts_need_rollouts_write_on_the_environment(console):
    reader = console.api_token(["rollouts:read"])
    with console.client(reader) as c:
        r = c.post("/api/v1/fleet/rollouts", json={"artifact": ARTIFACT})
    assert (r.status_code, r.json()["reason"]) == (403, "missing_scope")
    r = _create(console)
    other = console.bootstrap(client="acme", environment="staging")["token"]
    with console.client(other) as c:
        assert c.post(f"/api/v1/fleet/rollouts/{r['id']}/abort", json={}).status_code == 403


def test_a_console_restart_mid_rollout_loses_nothing_and_sends_nothing_twice(console, swarm):
    s = swarm(4)
    r = _create(console, waves={"canary_size": 2, "percentages": [100]})
    _post(console, f"/{r['id']}/start", json={})
    first = _post(console, f"/{r['id']}/waves/0/dispatch").json()
    wait_for(lambda: _get(console, r["id"])["waves"][0]["done"], what="wave 0 results")
    console.stop()
    console.start()
    again = _post(console, f"/{r['id']}/waves/0/dispatch").json()
    assert (again["sent"], again["already_sent"]) == (0, first["sent"])
    wait_for(
        lambda: all(
            a["status"] == "online"
            for a in console.client().get("/api/v1/fleet/agents").json()["items"]
        ),
        what="agents back after the restart",
    )
    _post(console, f"/{r['id']}/waves/1/dispatch")
    wait_for(lambda: _get(console, r["id"])["waves"][1]["done"], what="wave 1 results")
    assert _post(console, f"/{r['id']}/complete").json()["state"] == "succeeded"
    assert set(s.received_by().values()) == {1}
