"""The scaled deployment config (docs/scaling.md) parses and names real work-pool types."""

import json
from pathlib import Path

import prefect
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _worker_types() -> set[str]:
    path = (
        Path(prefect.__file__).parent
        / "server"
        / "api"
        / "collections_data"
        / "views"
        / "aggregate-worker-metadata.json"
    )
    data = json.loads(path.read_text())
    return {w["type"] for workers in data.values() for w in workers.values()}


def test_the_scaled_prefect_yaml_uses_a_real_kubernetes_work_pool_for_every_flow():
    scaled = yaml.safe_load((ROOT / "deploy/scaled/prefect.yaml").read_text())
    local = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert "kubernetes" in _worker_types()
    pools = scaled["definitions"]["work_pools"]
    assert {p["name"] for p in pools.values()} == {"proxima-k8s"}
    assert {d["entrypoint"] for d in scaled["deployments"]} <= {
        d["entrypoint"] for d in local["deployments"]
    }
    assert scaled["deployments"]
    for d in scaled["deployments"]:
        assert d["enforce_parameter_schema"] is True
        assert d["work_pool"]["name"] == "proxima-k8s"
    local_types = {"process"}
    assert local_types <= _worker_types()


def test_the_scaled_console_settings_are_real_settings():
    from console.core.settings import ConsoleSettings

    fields = {f"PROXIMA_{n.upper()}" for n in ConsoleSettings.model_fields}
    lines = (ROOT / "deploy/scaled/console.env").read_text().splitlines()
    settings = [line for line in lines if line and not line.startswith("#")]
    assert settings, "deploy/scaled/console.env sets nothing"
    for line in settings:
        assert line.split("=", 1)[0] in fields, line
