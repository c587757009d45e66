"""Rollouts in the Console with simulated agents on real NATS connections (no Prefect here:
tests/flows drives the same through the flow)."""

import asyncio
import json
import threading
from datetime import UTC, datetime

import nats
import pytest

from contracts import subjects
from contracts.rollouts import RolloutPublic
from contracts.vocabulary import CommandFailureKind
from testkit.console import Identity
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
    assert sorted(s.runs().values()) == [1] * 6
    with console.client() as c:
        one_wave = c.get(f"/api/v1/fleet/rollouts/{r['id']}", params={"wave": 2}).json()
        bare = c.get(f"/api/v1/fleet/rollouts/{r['id']}", params={"targets": "false"}).json()
    assert [t["wave"] for t in one_wave["targets"]] == [2, 2, 2]
    assert one_wave["counts"] == done["counts"] == bare["counts"]  # counts: the whole rollout
    assert bare["targets"] is None and bare["waves"] == done["waves"]


def test_each_halt_has_its_own_halted_at(console):
    """The flow's pause key for a halt: set by a stall or a pause, new for the next."""
    r = _create(console)
    assert r["halted_at"] is None
    _post(console, f"/{r['id']}/start", json={})
    first = _post(console, f"/{r['id']}/pause", json={"reason": "look"}).json()["halted_at"]
    assert first is not None
    assert _post(console, f"/{r['id']}/resume").json()["halted_at"] == first  # kept: the last
    second = _post(console, f"/{r['id']}/pause", json={"reason": "again"}).json()["halted_at"]
    assert second is not None and second != first


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
    # The reason, and who gave it (the token's name): an abort once recorded no actor.
    assert aborted["state"] == "aborted" and aborted["state_reason"] == "enough (by admin)"
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
    assert sorted(s.runs().values()) == [1] * 4


def test_an_agent_without_a_signing_key_is_excluded_for_that_reason(console, agents):
    """A real agent run from source without PROXIMA_SIGNING_PUBLIC_KEY says why it cannot
    self-update (``no_signing_key``) on its heartbeats: the exclusion says so, not "read-only
    program path"."""
    proc = agents(console, "keyless-host", console.install_token())
    proc.wait_ready()
    agent_id = proc.agent_id()

    def excluded() -> dict | None:
        r = _create(console, selector={"agent_ids": [agent_id]})
        found = [e for e in r["exclusions"] if e["agent_id"] == agent_id]
        return found[0] if found and "signing" in found[0]["detail"] else None

    exclusion = wait_for(excluded, what="a heartbeat with the agent's self_update_blocker")
    assert exclusion["reason"] == "cannot_self_update"
    assert "no signing public key" in exclusion["detail"]
    assert "read-only" not in exclusion["detail"]


async def _answer_failed(console, ident, agent_id, failure_kind, done, ready):
    """Answer every command as failed, with ``failure_kind``, over the agent's own key."""
    nc = await nats.connect(console.nats_url, **ident.nats_options())

    async def on_command(msg):
        cmd = json.loads(msg.data)
        result = {
            "command_id": cmd["command_id"],
            "agent_id": agent_id,
            "kind": cmd["kind"],
            "status": "failed",
            "finished_at": datetime.now(UTC).isoformat(),
            "error": "backup current binary: rename …: read-only file system",
            "failure_kind": failure_kind,
        }
        await nc.publish(subjects.command_result(agent_id), json.dumps(result).encode())

    await nc.subscribe(subjects.commands(agent_id), cb=on_command)
    beat = {
        "agent_id": agent_id,
        "instance_id": ident.instance_id,
        "agent_type": "host",
        "version": "0.8.0",
        "sent_at": datetime.now(UTC).isoformat(),
        "uptime_seconds": 1.0,
        "heartbeat_interval_seconds": 30,
    }
    await nc.publish(subjects.heartbeat(agent_id), json.dumps(beat).encode())
    await nc.flush()
    ready.set()
    while not done.is_set():
        await asyncio.sleep(0.05)
    await nc.close()


def test_a_failed_result_keeps_the_agents_failure_kind_on_its_target(console):
    ident = Identity(name="ro-host")
    agent_id = ident.enroll(console, console.install_token()).json()["agent_id"]
    done, ready = threading.Event(), threading.Event()
    answering = threading.Thread(
        target=asyncio.run,
        args=(_answer_failed(console, ident, agent_id, "read_only_program", done, ready),),
    )
    answering.start()
    try:
        assert ready.wait(30), "the simulated agent did not connect"
        r = _create(console, waves={"canary_size": 1, "percentages": [100]})
        _post(console, f"/{r['id']}/start", json={})
        _post(console, f"/{r['id']}/waves/0/dispatch")
        rollout = wait_for(
            lambda: (x := _get(console, r["id"]))["targets"][0]["status"] == "failed" and x,
            what="the failed result",
        )
    finally:
        done.set()
        answering.join(timeout=30)
    target = RolloutPublic.model_validate(rollout).targets[0]  # type: ignore[index]
    assert target.failure_kind is CommandFailureKind.READ_ONLY_PROGRAM
    assert target.error and "read-only file system" in target.error
