"""prefect.yaml deploys for real against a Prefect server (the test harness's)."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

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
    for name, dep in deployments.items():
        assert dep.enforce_parameter_schema is True, name
        assert dep.work_pool_name == "proxima-process", name
        assert dep.parameter_openapi_schema["properties"], name
    assert deployments["fleet-audit"].schedules, "the audit runs on a schedule"
    assert "rollout_id" in deployments["fleet-rollout"].parameter_openapi_schema["required"]
