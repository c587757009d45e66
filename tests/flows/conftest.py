"""Fixtures of the flow tests that run deployments: ``prefect.yaml`` deployed into the test
harness's Prefect, for real process workers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _env(prefect_api_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_API_URL": prefect_api_url,
        "PROXIMA_HOME": str(ROOT),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture(scope="module")
def deployed(prefect_api_url):
    """The work pool and every deployment of ``prefect.yaml``; the environment a worker needs."""
    env = _env(prefect_api_url)
    for args in (
        ("work-pool", "create", "proxima-process", "--type", "process", "--overwrite"),
        ("deploy", "--all", "--no-prompt"),
    ):
        done = subprocess.run(
            [PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr + done.stdout
    return env
