"""``proxima-fleet audit run``: the ``fleet-audit`` deployment started by the verb, run by a real
process worker (``--run-once``) under Prefect's test harness with ``prefect.yaml`` deployed,
waited for, and the audit the run recorded in the Console shown."""

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.states import Cancelled

from testkit.rollouts import create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
# ``deployed`` (prefect.yaml deployed, a worker's environment): tests/flows/conftest.py


def _env(console, prefect_api_url: str | None, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "KUBECONFIG"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "250",
        "PREFECT_HOME": str(home),  # no profile of the machine names a server
        "PROXIMA_CONSOLE_URL": console.url if console else "",
        "PROXIMA_CONSOLE_TOKEN": console.token if console else "",
    }
    if prefect_api_url:
        env["PREFECT_API_URL"] = prefect_api_url
    return env


def _fleet(env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.timeout(600)
def test_audit_run_starts_the_deployment_waits_and_shows_the_findings_it_recorded(
    deployed, flow_console, prefect_api_url, tmp_path
):
    env = _env(flow_console, prefect_api_url, tmp_path / "prefect-home")
    # The worker acts with the worker token (flow_console put it in the environment) and
    # reaches no cluster while the fleet has one: the audit records kubernetes_not_checked.
    with flow_console.client() as c:
        assert c.post("/api/v1/clusters", json={"name": "audited"}).status_code == 201
    worker_env = {k: v for k, v in deployed.items() if k != "KUBECONFIG"}
    worker_env |= {k: v for k, v in os.environ.items() if k.startswith("PROXIMA_")}
    progress = tmp_path / "progress.txt"
    with open(progress, "w") as err:
        verb = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "audit", "run", "--timeout", "300"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=ROOT,
        )
    worker = None
    try:
        started = wait_for(
            lambda: re.search(
                r"fleet-audit run \S+ \(([0-9a-f-]{36})\) started", progress.read_text()
            ),
            timeout=120,
            what="the verb started a run",
        )
        run_id = started.group(1)
        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [PREFECT, "worker", "start", "--pool", "proxima-process", "--run-once"],
                cwd=ROOT,
                env=worker_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        out, _ = verb.communicate(timeout=400)
        worker.wait(timeout=180)
    finally:
        for proc in (verb, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = progress.read_text()
    assert verb.returncode == 0, lines + (tmp_path / "worker.log").read_text()[-3000:]
    # Progress on stderr: the run's states as it passed through them, ending Completed.
    states = lines.strip().splitlines()[1:]
    assert states[0].endswith(": Scheduled") and states[-1].endswith(": Completed"), lines
    # The audit shown is the one this run recorded: its flow run id, its findings.
    assert run_id in out, out
    assert "kubernetes_not_checked" in out and "findings" in out
    latest = json.loads(_fleet(env, "audit", "show", "--json").stdout)
    assert latest["flow_run_id"] == run_id
    assert "kubernetes_not_checked" in {f["name"] for f in latest["findings"]}

    # --no-wait: the run's id on stdout, at once; no worker needed.
    quick = _fleet(env, "audit", "run", "--no-wait")
    assert quick.returncode == 0, quick.stderr
    assert re.fullmatch(r"[0-9a-f-]{36}", quick.stdout.strip())

    # Without the deployment: one line saying so and how to make it.
    async def delete():
        async with get_client() as client:
            deployment = await client.read_deployment_by_name("fleet-audit/fleet-audit")
            await client.delete_deployment(deployment.id)

    asyncio.run(delete())
    gone = _fleet(env, "audit", "run")
    assert gone.returncode == 1
    assert gone.stderr.startswith("proxima-fleet: error: deployment not found: no fleet-audit/")
    assert "proxima-fleet deploy" in gone.stderr and len(gone.stderr.splitlines()) == 1


def test_audit_run_without_prefect_api_url_is_one_configuration_line(tmp_path):
    r = _fleet(_env(None, None, tmp_path), "audit", "run")
    assert r.returncode == 2
    assert r.stderr == (
        "proxima-fleet: error: PREFECT_API_URL is not set: set it to the Prefect server's API, "
        "e.g. http://127.0.0.1:4200/api\n"
    )


def test_rollouts_restart_driver_starts_a_run_then_refuses_while_it_lives(
    deployed, flow_console, prefect_api_url, tmp_path
):
    """A rollout the Console never started in Prefect ("or that never had one"): the verb
    gives it a flow run of ``fleet-rollout``; asked again while that run is alive (scheduled,
    no worker here), the Console's 409 ``driver_running`` is one line."""
    env = _env(flow_console, prefect_api_url, tmp_path / "prefect-home")
    swarm = Swarm(flow_console, 2, prefix="drv-cli").start()
    new_run = None
    try:
        wait_for(
            lambda: all(flow_console.agent(a.agent_id)["status"] == "online" for a in swarm.agents),
            what="swarm online",
        )
        rollout = create_rollout(flow_console, "cli-restart")
        assert rollout["flow_run_id"] is None
        restarted = _fleet(env, "rollouts", "restart-driver", rollout["id"], "--json")
        assert restarted.returncode == 0, restarted.stderr
        new_run = json.loads(restarted.stdout)["flow_run_id"]
        assert new_run
        text = _fleet(env, "rollouts", "restart-driver", rollout["id"])
        assert text.returncode == 1
        assert text.stderr.startswith("proxima-fleet: error: driver_running: ")
        assert new_run in text.stderr and len(text.stderr.splitlines()) == 1
        aborted = _fleet(env, "rollouts", "abort", rollout["id"], "--reason", "test over")
        assert aborted.returncode == 0, aborted.stderr
    finally:
        swarm.stop()
        if new_run:  # no worker of a later test picks it up

            async def cancel():
                async with get_client() as client:
                    await client.set_flow_run_state(new_run, Cancelled(), force=True)

            asyncio.run(cancel())
