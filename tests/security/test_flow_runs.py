"""A rollout's flow run is the Console's own. ``POST …/rollouts/{id}/start`` recorded any
string as the rollout's ``flow_run_id``: a ``rollouts:write`` token pointed its rollout at
another tenant's paused ``fleet-rollout`` run, and the Console's resume (and its driver check's
owed resume) answered that run; ``../../admin/settings#`` made the Console fetch another Prefect
route and hand its answer back; a 60,000-character id was stored in a 64-character column.

Against real Consoles, on SQLite and PostgreSQL where the database matters, and Prefect's test
harness for the runs: an id that is not a UUID is a 422 and nothing is stored; a run the Console
did not start is recorded only when Prefect says it is a ``fleet-rollout`` run started with this
rollout's id; anything else is a 409 ``foreign_flow_run``, audited, and the run is untouched."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.states import Paused

from testkit.console import ConsoleProcess
from testkit.fixtures import ConsoleFactory
from testkit.rollouts import create_rollout

HOSTILE_IDS = ["../../admin/settings#", "x" * 60_000, "flow-run-1", ""]


def start(console: ConsoleProcess, rollout_id: str, flow_run_id: Any, token: str | None = None):
    with console.client(token) as c:
        return c.post(
            f"/api/v1/fleet/rollouts/{rollout_id}/start", json={"flow_run_id": flow_run_id}
        )


def rollout(console: ConsoleProcess, rollout_id: str, token: str | None = None) -> dict:
    with console.client(token) as c:
        r = c.get(f"/api/v1/fleet/rollouts/{rollout_id}")
        r.raise_for_status()
        return r.json()


def audit_lines(console: ConsoleProcess) -> list[str]:
    return [line for line in console.log_path.read_text().splitlines() if "proxima.audit" in line]


@pytest.mark.parametrize("hostile", HOSTILE_IDS, ids=["traversal", "60000", "not-uuid", "empty"])
def test_a_flow_run_id_that_is_not_a_uuid_is_a_422_and_nothing_is_stored(
    console: ConsoleProcess, hostile: str
):
    """A 60,000-character id was stored in a column declared 64 (SQLite), a path like
    ``../../admin/settings#`` was kept and later built into Prefect URLs."""
    r = create_rollout(console, "hostile-id")
    answer = start(console, r["id"], hostile)
    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["reason"] == "invalid_request" and len(answer.text) < 2000
    after = rollout(console, r["id"])
    assert after["flow_run_id"] is None and after["state"] == "pending"


# -- with Prefect -----------------------------------------------------------------------------


@flow(name="fleet-rollout")
def _fleet_rollout_stand_in(rollout_id: str) -> None:
    """Never run: only its name and parameters are registered, as a run of the real flow's."""


@flow(name="someone-elses-flow")
def _other_flow(rollout_id: str) -> None:
    """Never run."""


def paused_run(of_flow: Any, rollout_id: str) -> uuid.UUID:
    """A flow run in Prefect, paused, as a stalled rollout's run waits for its decision."""

    async def create() -> uuid.UUID:
        async with get_client() as client:
            run = await client.create_flow_run(
                of_flow, parameters={"rollout_id": rollout_id}, state=Paused()
            )
            return run.id

    return asyncio.run(create())


def run_state(run: uuid.UUID) -> str:
    async def read() -> str:
        async with get_client() as client:
            return (await client.read_flow_run(run)).state.type.value

    return asyncio.run(read())


@pytest.fixture
def tenants(console_factory: ConsoleFactory, prefect_api_url: str):
    """One Console driving rollouts through the harness's Prefect, with two tenants: the
    victim (``acme``) and the attacker (``mallory``), each with a rollout."""
    console = console_factory(
        name="prefect-console",
        env={"PROXIMA_PREFECT_API_URL": prefect_api_url, "PROXIMA_DRIVER_CHECK_SECONDS": "0.5"},
    )
    attacker = console.bootstrap(client="mallory", environment="dev")["token"]
    victim_rollout = create_rollout(console, "victim")
    with console.client(attacker) as c:
        body = {
            "name": "attacker",
            "artifact": {
                "version": "0.9.0",
                "url": "http://127.0.0.1:1/a.pyz",
                "sha256": "0" * 64,
                "signature": "s" * 86,
            },
            "start_flow": False,
        }
        made = c.post("/api/v1/fleet/rollouts", json=body)
        assert made.status_code == 201, made.text
    return console, attacker, victim_rollout, made.json()


def test_a_rollout_cannot_take_another_tenants_paused_run(tenants):
    """A ``rollouts:write`` token recorded another tenant's stalled run as its rollout's; the
    Console then resumed that run with the victim's decision."""
    console, attacker, victim, own = tenants
    victims_run = paused_run(_fleet_rollout_stand_in, victim["id"])
    refused = start(console, own["id"], str(victims_run), attacker)
    assert refused.status_code == 409, refused.text
    assert refused.json()["reason"] == "foreign_flow_run"
    assert rollout(console, own["id"], attacker)["flow_run_id"] is None
    with console.client(attacker) as c:
        c.post(f"/api/v1/fleet/rollouts/{own['id']}/pause", json={})
        c.post(f"/api/v1/fleet/rollouts/{own['id']}/resume")
        c.post(f"/api/v1/fleet/rollouts/{own['id']}/abort", json={})
    assert run_state(victims_run) == "PAUSED", "the victim's run was never resumed"
    refusal = [line for line in audit_lines(console) if "rollout_flow_run_refused" in line]
    assert refusal and str(victims_run) in refusal[0] and own["id"] in refusal[0]


def test_a_run_of_another_flow_or_unknown_to_prefect_is_refused(tenants):
    """Any UUID was recorded: a run of another flow, or one Prefect never heard of."""
    console, attacker, _victim, own = tenants
    other = paused_run(_other_flow, own["id"])
    for run in (other, uuid.uuid4()):
        answer = start(console, own["id"], str(run), attacker)
        assert answer.status_code == 409, answer.text
        assert answer.json()["reason"] == "foreign_flow_run"
    assert run_state(other) == "PAUSED"
    assert sum("rollout_flow_run_refused" in line for line in audit_lines(console)) == 2


def test_the_rollouts_own_run_is_recorded_and_prefects_words_are_not_echoed(tenants):
    """The rollout's own run (started outside the Console, from the Prefect UI say) is still
    recorded; Prefect's answers reach the caller only as the Console's words."""
    console, attacker, _victim, own = tenants
    run = paused_run(_fleet_rollout_stand_in, own["id"])
    answer = start(console, own["id"], str(run), attacker)
    assert answer.status_code == 200, answer.text
    assert answer.json()["flow_run_id"] == str(run) and answer.json()["state"] == "running"
    again = start(console, own["id"], str(run), attacker)  # the flow asking again: idempotent
    assert again.status_code == 200
    with console.client(attacker) as c:
        c.post(f"/api/v1/fleet/rollouts/{own['id']}/pause", json={})
        resumed = c.post(f"/api/v1/fleet/rollouts/{own['id']}/resume")
    assert resumed.status_code == 200, resumed.text
    assert run_state(run) != "PAUSED", "the rollout's own paused run was resumed"
