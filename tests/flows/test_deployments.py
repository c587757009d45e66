"""prefect.yaml deploys for real against a Prefect server (the test harness's)."""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _prefect(*args, env):
    return subprocess.run(
        [PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


def test_prefect_deploy_all_creates_every_deployment_with_enforced_schemas(prefect_api_url):
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api_url,
        "PROXIMA_HOME": str(ROOT),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    pool = _prefect(
        "work-pool", "create", "proxima-process", "--type", "process", "--overwrite", env=env
    )
    assert pool.returncode == 0, pool.stderr + pool.stdout
    deployed = _prefect("deploy", "--all", "--no-prompt", env=env)
    assert deployed.returncode == 0, deployed.stderr + deployed.stdout
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    names = {
        "flows/rollout.py:fleet_rollout": "fleet-rollout",
        "flows/audit.py:fleet_audit": "fleet-audit",
        "flows/identity_release.py:identity_release": "identity-release",
        "flows/enrollment_check.py:enrollment_check": "enrollment-check",
        "flows/migration.py:hostdatadir_migration": "hostdatadir-migration",
    }

    async def read_all():
        from prefect.client.orchestration import get_client

        async with get_client() as client:
            return {
                d["name"]: await client.read_deployment_by_name(
                    f"{names[d['entrypoint']]}/{d['name']}"
                )
                for d in spec["deployments"]
            }

    deployments = asyncio.run(read_all())
    assert deployments and len(deployments) == len(spec["deployments"])
    for name, dep in deployments.items():
        assert dep.enforce_parameter_schema is True, name
        assert dep.work_pool_name == "proxima-process", name
        assert dep.parameter_openapi_schema["properties"], name
        # The UI's Custom run form shows each parameter's description.
        undescribed = [
            key
            for key, prop in dep.parameter_openapi_schema["properties"].items()
            if not prop.get("description")
        ]
        assert undescribed == [], (name, undescribed)
    assert deployments["fleet-audit"].schedules, "the audit runs on a schedule"
    # The scheduled audit must not switch the DaemonSet data-directory check off.
    assert deployments["fleet-audit"].parameters.get("check_kubernetes") is None
    assert "rollout_id" in deployments["fleet-rollout"].parameter_openapi_schema["required"]


def test_a_rollout_created_through_the_console_starts_the_fleet_rollout_deployment(
    prefect_api_url, flow_console
):
    """API-triggered: the Console records the rollout and creates a flow run of the deployment
    (a worker would pick it up; here we read it back from Prefect)."""
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api_url,
        "PROXIMA_HOME": str(ROOT),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    assert (
        _prefect(
            "work-pool", "create", "proxima-process", "--type", "process", "--overwrite", env=env
        ).returncode
        == 0
    )
    assert _prefect("deploy", "--all", "--no-prompt", env=env).returncode == 0
    artifact = {
        "version": "0.9.0",
        "url": "http://127.0.0.1:1/a.pyz",
        "sha256": "0" * 64,
        "signature": "s" * 86,
    }
    with flow_console.client() as c:
        r = c.post("/api/v1/fleet/rollouts", json={"name": "api", "artifact": artifact})
    assert r.status_code == 201, r.text
    flow_run_id = r.json()["flow_run_id"]
    assert flow_run_id, r.json()["state_reason"]

    async def read():
        from prefect.client.orchestration import get_client

        async with get_client() as client:
            return await client.read_flow_run(flow_run_id)

    run = asyncio.run(read())
    assert run.parameters == {"rollout_id": r.json()["id"]}
    assert run.deployment_id is not None


def test_a_run_with_a_misspelt_parameter_is_refused_up_front_once_deployed_sealed(prefect_api_url):
    """What broke: a REST run of a deployment with a misspelt parameter was accepted (201:
    Prefect's generated schema leaves unknown names open even with enforce_parameter_schema) and
    failed later on a worker. `proxima-fleet deploy` seals every schema: Prefect answers 409
    naming the parameter, and a run with the flow's own parameters is still created."""
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api_url,
        "PROXIMA_HOME": str(ROOT),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    pool = _prefect(
        "work-pool", "create", "proxima-process", "--type", "process", "--overwrite", env=env
    )
    assert pool.returncode == 0, pool.stderr + pool.stdout
    assert _prefect("deploy", "--all", "--no-prompt", env=env).returncode == 0
    api = httpx.Client(base_url=prefect_api_url, timeout=30)

    def run(deployment: str, parameters: dict) -> httpx.Response:
        dep = api.get(f"/deployments/name/{deployment}")
        assert dep.status_code == 200, dep.text
        return api.post(
            f"/deployments/{dep.json()['id']}/create_flow_run", json={"parameters": parameters}
        )

    # What the operator hit: plain `prefect deploy` leaves the schema open.
    loose = run("identity-release/identity-release", {"dry_rn": False})
    assert loose.status_code == 201, loose.text
    assert api.delete(f"/flow_runs/{loose.json()['id']}").status_code == 204

    sealed = subprocess.run(
        [sys.executable, "-m", "flows.cli", "deploy", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sealed.returncode == 0, sealed.stderr + sealed.stdout
    report = {r["deployment"]: r for r in json.loads(sealed.stdout)}
    assert set(report) == {
        "fleet-rollout/fleet-rollout",
        "fleet-audit/fleet-audit",
        "identity-release/identity-release",
        "enrollment-check/enrollment-check",
        "hostdatadir-migration/hostdatadir-migration",
    }
    assert all(r["sealed"] for r in report.values()), report

    refused = run("identity-release/identity-release", {"dry_rn": False})
    assert refused.status_code == 409, refused.text
    assert "'dry_rn' was unexpected" in refused.json()["detail"]
    refused = run("fleet-rollout/fleet-rollout", {"rollout_id": "r1", "poll_second": 1})
    assert refused.status_code == 409 and "'poll_second'" in refused.json()["detail"]
    accepted = run("identity-release/identity-release", {"agent_ids": ["a1"], "dry_run": True})
    assert accepted.status_code == 201, accepted.text
    assert api.delete(f"/flow_runs/{accepted.json()['id']}").status_code == 204
    # The schedule's and prefect.yaml's default parameters still validate against it.
    audit = api.get("/deployments/name/fleet-audit/fleet-audit").json()
    assert audit["parameter_openapi_schema"]["additionalProperties"] is False
    assert audit["parameters"] == {}

    again = subprocess.run(
        [sys.executable, "-m", "flows.cli", "deploy", "--seal-only", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert not any(r["sealed"] for r in json.loads(again.stdout))
