"""The fleet-rollout flow under Prefect's test harness, against a real Console and NATS, with
simulated agents on real NATS sessions (tests/e2e rolls real agent processes)."""

import asyncio
import os
import subprocess
import sys
import threading

import httpx
from prefect.client.orchestration import get_client

from flows.rollout import fleet_rollout
from testkit.rollouts import create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for


def _create(console, **over):
    return create_rollout(console, "flow-test", **over)


def _get(console, rid):
    with console.client() as c:
        return c.get(f"/api/v1/fleet/rollouts/{rid}").json()


def _online(console, n):
    wait_for(
        lambda: (
            console.client()
            .get("/api/v1/fleet/agents", params={"status": "online"})
            .json()["total"]
            >= n
        ),
        what=f"{n} agents online",
    )


async def _task_runs(flow_run_id):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
        return runs


def test_the_flow_rolls_every_wave_with_one_task_per_wave(flow_console):
    swarm = Swarm(flow_console, 6).start()
    try:
        _online(flow_console, 6)
        r = _create(flow_console)
        result = fleet_rollout(rollout_id=r["id"], poll_seconds=0.1)
        assert result["state"] == "succeeded"
        final = _get(flow_console, r["id"])
        assert final["counts"]["succeeded"] == 6
        # each agent ran its one command once (a resend of it is received, never run again)
        assert sorted(swarm.runs().values()) == [1] * 6
        runs = wait_for(
            lambda: (x := asyncio.run(_task_runs(final["flow_run_id"]))) and len(x) >= 3 and x,
            what="task runs recorded",
        )
        assert len(runs) == 3, [t.name for t in runs]
    finally:
        swarm.stop()


def test_a_stalled_flow_waits_for_a_decision_and_resumes_from_the_console(flow_console):
    def behaviour(name, cmd):
        if name.endswith("0"):
            return "failed", "backup current binary: rename …: read-only file system", None
        return "succeeded", None, cmd["args"]["version"]

    swarm = Swarm(flow_console, 5, prefix="stall", behaviour=behaviour).start()
    try:
        _online(flow_console, 5)
        r = _create(
            flow_console,
            waves={"canary_size": 5, "percentages": [100]},
            criteria=[{"failure_type": "failed", "threshold_count": 1}],
        )
        outcome = {}
        thread = threading.Thread(
            target=lambda: outcome.update(
                fleet_rollout(rollout_id=r["id"], poll_seconds=0.1, decision_poll_seconds=1)
            )
        )
        thread.start()
        wait_for(lambda: _get(flow_console, r["id"])["state"] == "stalled", what="stall")
        flow_run_id = wait_for(lambda: _get(flow_console, r["id"])["flow_run_id"])

        async def paused():
            async with get_client() as client:
                return (await client.read_flow_run(flow_run_id)).state.is_paused()

        wait_for(lambda: asyncio.run(paused()), timeout=30, what="flow run paused for input")
        with flow_console.client() as c:
            assert c.post(f"/api/v1/fleet/rollouts/{r['id']}/resume").json()["state"] == "running"
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert outcome["state"] == "succeeded"
    finally:
        swarm.stop()


def test_abort_from_the_console_ends_a_paused_flow(flow_console):
    swarm = Swarm(
        flow_console, 3, prefix="abort", behaviour=lambda n, c: ("failed", "boom", None)
    ).start()
    try:
        _online(flow_console, 3)
        r = _create(
            flow_console,
            waves={"canary_size": 1, "percentages": [100]},
            criteria=[{"failure_type": "any", "threshold_count": 1}],
        )
        states = []
        thread = threading.Thread(
            target=lambda: states.append(
                fleet_rollout(
                    rollout_id=r["id"], poll_seconds=0.1, decision_poll_seconds=1, return_state=True
                )
            )
        )
        thread.start()
        wait_for(lambda: _get(flow_console, r["id"])["state"] == "stalled")
        wait_for(lambda: _get(flow_console, r["id"])["flow_run_id"])
        with flow_console.client() as c:
            c.post(f"/api/v1/fleet/rollouts/{r['id']}/abort", json={"reason": "bad build"})
        thread.join(timeout=60)
        (state,) = states
        # An aborted rollout is a Failed flow run, not a Completed one.
        assert state.is_failed(), state
        assert "ended aborted" in (state.message or "")
        outcome = state.result(raise_on_failure=False)
        assert outcome["state"] == "aborted"
        later = [t for t in _get(flow_console, r["id"])["targets"] if t["wave"] > 0]
        assert later, "no later wave to hold back"
        assert all(swarm.received_by()[t["agent_name"]] == 0 for t in later)
    finally:
        swarm.stop()


def test_a_flow_killed_mid_rollout_and_run_again_sends_nothing_twice(flow_console, prefect_api_url):
    swarm = Swarm(
        flow_console,
        8,
        prefix="crash",
        behaviour=lambda n, c: (
            ("silent", None, None) if n.endswith("7") else ("succeeded", None, c["args"]["version"])
        ),
    ).start()
    try:
        _online(flow_console, 8)
        r = _create(
            flow_console,
            wave_timeout_seconds=4,
            waves={"canary_size": 1, "percentages": [50, 100]},
            criteria=[{"failure_type": "failed", "threshold_count": 1}],
        )
        code = (
            f"from flows.rollout import fleet_rollout; fleet_rollout(rollout_id={r['id']!r}, "
            "poll_seconds=0.1)"
        )
        env = {**os.environ, "PREFECT_API_URL": prefect_api_url}
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(
            lambda: any(w["dispatched"] for w in _get(flow_console, r["id"])["waves"][1:]),
            timeout=60,
            what="a growth wave dispatched",
        )
        proc.kill()
        proc.wait()
        before = swarm.received_by()
        rerun = fleet_rollout(rollout_id=r["id"], poll_seconds=0.1)
        assert rerun["state"] == "succeeded"
        after = swarm.received_by()
        assert set(swarm.runs().values()) == {1} and min(after.values()) >= 1, after
        assert sum(before.values()) <= sum(after.values())
        assert _get(flow_console, r["id"])["counts"]["timed_out"] <= 1
    finally:
        swarm.stop()


def test_prefect_yaml_declares_the_rollout_deployment_with_an_enforced_schema():
    import yaml

    spec = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "../../prefect.yaml")))
    deployments = {d["name"]: d for d in spec["deployments"]}
    d = deployments["fleet-rollout"]
    assert d["entrypoint"] == "flows/rollout.py:fleet_rollout"
    assert d["enforce_parameter_schema"] is True
    assert d["work_pool"]["name"] == "proxima-process"
    assert httpx  # the REST path is covered by the Console's start_deployment (see docs)
