"""A stalled rollout holds no worker slot: a run of the ``fleet-rollout``
deployment that meets a halt is **suspended** — Prefect keeps its state and the decision it
waits for, the process exits — and a resume, from the Console or from Prefect (the UI's
button calls the same endpoint), schedules it again; a worker runs it to completion.

Under Prefect's test harness with ``prefect.yaml`` deployed and real process workers started
with ``--run-once`` (a worker that ends once its runs have ended)."""

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from testkit.rollouts import create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
# ``deployed`` (prefect.yaml deployed, a worker's environment): tests/flows/conftest.py


@pytest.fixture
def driven_console(console_factory, prefect_api_url, monkeypatch):
    """A Console that starts and resumes the deployment's runs through the harness's Prefect."""
    console = console_factory(
        name="suspend-console",
        env={"PROXIMA_PREFECT_API_URL": prefect_api_url, "PROXIMA_AGENT_STALE_SECONDS": "120"},
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.token)
    return console


def _get(console, rid):
    with console.client() as c:
        return c.get(f"/api/v1/fleet/rollouts/{rid}").json()


def _get_total_online(console) -> int:
    with console.client() as c:
        return c.get("/api/v1/fleet/agents", params={"status": "online"}).json()["total"]


def _run(coro_fn):
    async def run():
        async with get_client() as client:
            return await coro_fn(client)

    return asyncio.run(run())


def _flow_run(run_id):
    return _run(lambda c: c.read_flow_run(run_id))


def _running_tasks(run_id) -> list[str]:
    runs = _run(
        lambda c: c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    )
    return [t.name for t in runs if t.state is not None and t.state.is_running()]


def _worker(env, log_path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "proxima-process", "--run-once"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _suspended_and_gone(worker: subprocess.Popen, run_id: str, console, rid: str) -> None:
    """The halt holds nothing: the worker (and the flow's process under it) ended, the run is
    Suspended in Prefect, no task run is running."""
    worker.wait(timeout=180)  # --run-once ends only when its flow process has ended
    assert _get(console, rid)["state"] == "stalled"
    run = _flow_run(run_id)
    assert run.state.is_paused() and run.state.name == "Suspended", run.state
    assert _running_tasks(run_id) == []


@pytest.mark.timeout(900)
def test_a_stalled_rollout_is_suspended_and_resumes_from_the_console_then_from_prefect(
    deployed, driven_console, tmp_path
):
    env = {**deployed, **{k: v for k, v in os.environ.items() if k.startswith("PROXIMA_")}}
    lock = threading.Lock()
    seen: list[str] = []

    def behaviour(name, cmd):
        with lock:
            seen.append(name)
            first_two = len(seen) <= 2  # the canary, then the first answer of wave 1
        if first_two:
            return "failed", "backup current binary: rename …: read-only file system", None
        return "succeeded", None, cmd["args"]["version"]

    swarm = Swarm(driven_console, 6, prefix="susp", behaviour=behaviour).start()
    workers: list[subprocess.Popen] = []
    log = tmp_path / "workers.log"
    try:
        wait_for(lambda: _get_total_online(driven_console) >= 6, timeout=60, what="online")
        r = create_rollout(
            driven_console,
            "suspend",
            start_flow=True,  # the Console starts the deployment: a worker runs it
            waves={"canary_size": 1, "percentages": [50, 100]},
            criteria=[{"failure_type": "failed", "threshold_count": 1}],
        )
        run_id = wait_for(lambda: _get(driven_console, r["id"])["flow_run_id"], what="run")
        workers.append(_worker(env, log))
        _suspended_and_gone(workers[-1], run_id, driven_console, r["id"])
        first_halt = _get(driven_console, r["id"])["halted_at"]

        # 1. Resumed from the Console: Prefect schedules the run again ("Resuming").
        with driven_console.client() as c:
            answer = c.post(f"/api/v1/fleet/rollouts/{r['id']}/resume")
        assert answer.status_code == 200 and answer.json()["state"] == "running", answer.text
        assert _flow_run(run_id).state.is_scheduled()
        workers.append(_worker(env, log))
        _suspended_and_gone(workers[-1], run_id, driven_console, r["id"])  # wave 1's failure
        assert _get(driven_console, r["id"])["halted_at"] != first_halt

        # 2. Resumed in Prefect (what the UI's Resume button does): the run meets the same
        # halt again, takes the decision, and resumes the rollout in the Console itself.
        _run(lambda c: c.resume_flow_run(run_id, run_input={"decision": "resume"}))
        workers.append(_worker(env, log))
        workers[-1].wait(timeout=180)
        final = _get(driven_console, r["id"])
        assert final["state"] == "succeeded", final["state_reason"]
        assert final["counts"]["succeeded"] == 4 and final["counts"]["failed"] == 2
        assert set(swarm.received_by().values()) == {1}, swarm.received_by()
        assert _flow_run(run_id).state.is_completed()
    except BaseException:
        print(log.read_text() if log.exists() else "no worker log")
        raise
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
                w.wait(timeout=30)
        swarm.stop()
