"""Creating rollouts through the Console's API in tests."""

from typing import Any

from testkit.console import ConsoleProcess

# An artifact reference for simulated agents, which never download it.
ARTIFACT = {
    "version": "0.9.0",
    "url": "http://127.0.0.1:1/a.pyz",
    "sha256": "0" * 64,
    "signature": "s" * 86,
}


def create_rollout(
    console: ConsoleProcess, name: str = "r", *, timeout: float = 30.0, **over: Any
) -> dict[str, Any]:
    """POST a rollout (not started in Prefect unless ``start_flow=True``) and return it
    (``timeout``: the Console plans every agent of the fleet before it answers)."""
    body = {
        "name": name,
        "artifact": ARTIFACT,
        "start_flow": False,
        "waves": {"canary_size": 1, "percentages": [50, 100]},
        **over,
    }
    with console.client() as c:
        r = c.post("/api/v1/fleet/rollouts", json=body, timeout=timeout)
        assert r.status_code == 201, r.text
        data: dict[str, Any] = r.json()
        return data
