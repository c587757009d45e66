"""Rollouts that never lose their driver: when the ``fleet-rollout`` flow run of a
live rollout crashed (a token without ``rollouts:read``) or was cancelled in Prefect, the
rollout stayed ``running`` with nothing driving it and the UI showed it as running; a resume
that Prefect refused answered 200.

Under Prefect's test harness with ``prefect.yaml`` deployed and a real process worker: the
Console notices the lost driver within one sweep, and its restart finishes the rollout with no
second send."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.states import Cancelled, Crashed

from testkit.rollouts import create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
CHECK_SECONDS = 1.0


# ``deployed`` (prefect.yaml deployed, a worker's environment): tests/flows/conftest.py


@pytest.fixture
def driven_console(console_factory, prefect_api_url, monkeypatch):
    console = console_factory(
        name="driver-console",
        env={
            "PROXIMA_PREFECT_API_URL": prefect_api_url,
            "PROXIMA_AGENT_STALE_SECONDS": "120",
            "PROXIMA_DRIVER_CHECK_SECONDS": str(CHECK_SECONDS),
        },
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.token)
    return console


def _get(console, rid):
    with console.client() as c:
        return c.get(f"/api/v1/fleet/rollouts/{rid}").json()


def _set_state(flow_run_id: str, state) -> None:
    async def run():
        async with get_client() as client:
            await client.set_flow_run_state(flow_run_id, state, force=True)

    asyncio.run(run())


def _flow_process(env: dict[str, str], rollout_id: str, **params) -> subprocess.Popen:
    args = ", ".join(f"{k}={v!r}" for k, v in {"rollout_id": rollout_id, **params}.items())
    code = f"from flows.rollout import fleet_rollout; fleet_rollout({args})"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, **{k: v for k, v in os.environ.items() if k.startswith("PROXIMA_")}},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(("kill_as", "reason"), [(Crashed, "crashed"), (Cancelled, "cancelled")])
def test_a_lost_driver_is_shown_within_a_sweep_and_its_restart_sends_nothing_twice(
    deployed, driven_console, kill_as, reason
):
    gate = threading.Event()  # the canary's answer waits until its flow run is gone

    def behaviour(name, cmd):
        gate.wait(timeout=120)
        return "succeeded", None, cmd["args"]["version"]

    swarm = Swarm(driven_console, 6, prefix=f"drv-{reason}", behaviour=behaviour).start()
    worker = None
    try:
        wait_for(lambda: _get_total_online(driven_console) >= 6, timeout=60, what="6 agents online")
        r = create_rollout(
            driven_console,
            f"driver-{reason}",
            wave_timeout_seconds=120,
            waves={"canary_size": 1, "percentages": [50, 100]},
        )
        flow = _flow_process(deployed, r["id"], poll_seconds=0.2)
        wait_for(
            lambda: _get(driven_console, r["id"])["counts"]["dispatched"] == 1,
            timeout=90,
            what="the canary dispatched by the first flow run",
        )
        first_run = _get(driven_console, r["id"])["flow_run_id"]
        flow.send_signal(signal.SIGKILL)  # the process is gone; Prefect says how
        flow.wait()
        _set_state(first_run, kill_as())
        lost = wait_for(
            lambda: (x := _get(driven_console, r["id"]))["driver_lost_reason"] and x,
            timeout=CHECK_SECONDS * 3 + 10,
            what="the lost driver shown",
        )
        assert lost["driver_lost_reason"] == reason
        assert lost["state"] == "running" and first_run in lost["driver_lost_detail"]
        with driven_console.client() as c:
            refused = c.post(f"/api/v1/fleet/rollouts/{r['id']}/resume")
        assert refused.status_code == 409  # nothing to resume: running, driver gone
        gate.set()
        wait_for(lambda: _get(driven_console, r["id"])["counts"]["succeeded"] == 1)
        with driven_console.client() as c:
            restarted = c.post(f"/api/v1/fleet/rollouts/{r['id']}/restart-driver")
            assert restarted.status_code == 200, restarted.text
            again = c.post(f"/api/v1/fleet/rollouts/{r['id']}/restart-driver")
        assert restarted.json()["driver_lost_reason"] is None
        assert restarted.json()["flow_run_id"] not in (None, first_run)
        assert again.status_code == 409 and again.json()["reason"] == "driver_running"
        worker = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "proxima-process", "--run-once"],
            cwd=ROOT,
            env={**deployed, **{k: v for k, v in os.environ.items() if k.startswith("PROXIMA_")}},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        done = wait_for(
            lambda: (x := _get(driven_console, r["id"]))["state"] == "succeeded" and x,
            timeout=180,
            what="the restarted driver completes the rollout",
        )
        assert done["counts"]["succeeded"] == 6
        # no second execution: the restarted run dispatches nothing already dispatched, and a
        # resend (same command id, while the gated canary had no result) is never run again
        assert sorted(swarm.runs().values()) == [1] * 6, swarm.runs()
    finally:
        gate.set()
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
        swarm.stop()


def _get_total_online(console) -> int:
    with console.client() as c:
        return c.get("/api/v1/fleet/agents", params={"status": "online"}).json()["total"]


def test_a_resume_of_a_cancelled_paused_flow_run_is_refused_not_answered_200(
    deployed, driven_console
):
    """What broke: the paused flow run was cancelled in Prefect; ``POST …/resume``
    answered 200 ``running`` with nothing driving the rollout."""
    swarm = Swarm(
        driven_console, 3, prefix="paused", behaviour=lambda n, c: ("failed", "boom", None)
    ).start()
    flow = None
    try:
        wait_for(lambda: _get_total_online(driven_console) >= 3, timeout=60, what="online")
        r = create_rollout(
            driven_console,
            "paused-cancelled",
            waves={"canary_size": 1, "percentages": [100]},
            criteria=[{"failure_type": "any", "threshold_count": 1}],
        )
        flow = _flow_process(deployed, r["id"], poll_seconds=0.2, decision_poll_seconds=1)
        wait_for(lambda: _get(driven_console, r["id"])["state"] == "stalled", timeout=90)
        run_id = wait_for(lambda: _get(driven_console, r["id"])["flow_run_id"])

        async def paused():
            async with get_client() as client:
                return (await client.read_flow_run(run_id)).state.is_paused()

        wait_for(lambda: asyncio.run(paused()), timeout=60, what="flow run paused for input")
        flow.send_signal(signal.SIGKILL)
        flow.wait()
        _set_state(run_id, Cancelled())
        with driven_console.client() as c:
            answer = c.post(f"/api/v1/fleet/rollouts/{r['id']}/resume")
        assert answer.status_code == 409, answer.text
        assert answer.json()["reason"] in ("driver_lost", "resume_refused")
        shown = _get(driven_console, r["id"])
        assert shown["state"] == "stalled"
        assert shown["driver_lost_reason"] == "cancelled"
    finally:
        if flow is not None and flow.poll() is None:
            flow.kill()
            flow.wait()
        swarm.stop()


def test_a_resume_that_lands_before_the_run_pauses_is_not_lost(driven_console, monkeypatch):
    """The flow reads its rollout stalled, then pauses for a decision; a resume in between
    found the run not paused, resumed only the rollout, and the run then waited paused for a
    decision already taken, with nothing driving a ``running`` rollout (how
    ``tests/e2e/test_rollout_e2e.py`` once failed in CI). The flow is held between its read
    and its pause; the Console's driver check resumes the run once it pauses."""
    import flows.rollout as rollout_flow

    reached, release = threading.Event(), threading.Event()
    pause_for_decision = rollout_flow._wait_for_decision

    def late(r, timeout, poll):
        reached.set()
        release.wait(timeout=120)  # the operator's resume lands here, before the pause
        return pause_for_decision(r, timeout, poll)

    monkeypatch.setattr(rollout_flow, "_wait_for_decision", late)
    answers = iter(["failed", *["succeeded"] * 10])  # the canary fails, the rest succeed
    lock = threading.Lock()

    def behaviour(name, cmd):
        with lock:
            status = next(answers)
        return status, ("boom" if status == "failed" else None), cmd["args"]["version"]

    swarm = Swarm(driven_console, 3, prefix="raced", behaviour=behaviour).start()
    outcome: dict = {}
    try:
        wait_for(lambda: _get_total_online(driven_console) >= 3, timeout=60, what="online")
        r = create_rollout(
            driven_console,
            "raced-resume",
            waves={"canary_size": 1, "percentages": [100]},
            criteria=[{"failure_type": "any", "threshold_count": 1}],
        )
        thread = threading.Thread(
            target=lambda: outcome.update(
                rollout_flow.fleet_rollout(
                    rollout_id=r["id"],
                    poll_seconds=0.2,
                    decision_timeout_seconds=300,
                    decision_poll_seconds=1,
                )
            ),
            daemon=True,  # without the fix it would wait out its decision timeout
        )
        thread.start()
        assert reached.wait(timeout=90), "the flow never met the stall"
        assert _get(driven_console, r["id"])["state"] == "stalled"
        with driven_console.client() as c:
            resumed = c.post(f"/api/v1/fleet/rollouts/{r['id']}/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["state"] == "running"  # the run was not paused: nothing resumed
        release.set()
        thread.join(timeout=CHECK_SECONDS * 3 + 60)
        assert outcome.get("state") == "succeeded", (outcome, _get(driven_console, r["id"]))
        assert _get(driven_console, r["id"])["counts"]["succeeded"] == 2
        assert "rollout_driver_resumed" in driven_console.log_path.read_text()
    finally:
        release.set()
        swarm.stop()
