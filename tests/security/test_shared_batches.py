"""One agent's message never poisons the batch it shares with other tenants' messages, and a
Console that records nothing says so on ``/readyz``. A real Console and its nats-server, real
agents beside agents driven by hand (signed nkeys, their own JWTs), SQLite and PostgreSQL.

What broke: on PostgreSQL one heartbeat with a 100-character ``instance_id`` (the contract
allows 128, the column held 64) failed its heartbeat batch, which was kept and retried with
every later batch: no agent of any tenant had a heartbeat recorded until a restart, everyone
went offline, ``/readyz`` stayed ok and the log grew a traceback every 200 ms. A result whose
``detail.new_version`` was a JSON object (or 65 characters on PostgreSQL) failed the shared
result batch, so other tenants' results were not recorded on first delivery.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import nats
import pytest
from sqlalchemy import create_engine, text

from contracts import subjects
from testkit.console import ConsoleProcess, Identity
from testkit.rollouts import ARTIFACT
from testkit.waiting import wait_for


def _rejected(console: ConsoleProcess, kind: str, reason: str) -> float:
    body = httpx.get(f"{console.url}/metrics", timeout=5).text
    series = re.escape(f'proxima_messages_rejected_total{{kind="{kind}",reason="{reason}"}}')
    found = re.search(series + r" ([0-9.e+]+)", body)
    return float(found.group(1)) if found else 0.0


def _tenant_b(console: ConsoleProcess) -> tuple[str, str]:
    """Another client's admin API token and one of its install tokens."""
    admin = console.bootstrap(client="globex", environment="prod")["token"]
    with console.client(admin) as c:
        r = c.post("/api/v1/install-tokens", json={"name": "b"})
        r.raise_for_status()
        return admin, str(r.json()["token"])


def _agent(console: ConsoleProcess, agent_id: str, token: str | None = None) -> dict[str, Any]:
    with console.client(token) as c:
        r = c.get(f"/api/v1/fleet/agents/{agent_id}")
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data


def _beat(agent_id: str, ident: Identity, **over: Any) -> bytes:
    body = {
        "agent_id": agent_id,
        "instance_id": ident.instance_id,
        "agent_type": ident.agent_type,
        "version": "0.8.0",
        "sent_at": datetime.now(UTC).isoformat(),
        "uptime_seconds": 1.0,
        "heartbeat_interval_seconds": 1.0,
        **over,
    }
    return json.dumps(body).encode()


async def _send_beats(
    console: ConsoleProcess, ident: Identity, agent_id: str, count: int, **over: Any
) -> None:
    """``count`` heartbeats over about ``count / 10`` seconds (many batches)."""
    nc = await nats.connect(console.nats_url, **ident.nats_options(), connect_timeout=3)
    try:
        for _ in range(count):
            await nc.publish(subjects.heartbeat(agent_id), _beat(agent_id, ident, **over))
            await nc.flush()
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


def _refuse_updates_of(console: ConsoleProcess, agent_id: str) -> None:
    """Plant a trigger that makes the database refuse any update of one agent's row: the
    stand-in for any row the database cannot take (a column narrower than its contract, as
    ``instance_id`` was)."""
    url = console.database_url()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if url.startswith("postgresql"):
                conn.execute(
                    text(
                        "CREATE FUNCTION refuse_row() RETURNS trigger AS $$ BEGIN "
                        "RAISE EXCEPTION 'this row is refused'; END $$ LANGUAGE plpgsql"
                    )
                )
                conn.execute(
                    text(
                        "CREATE TRIGGER refuse_row BEFORE UPDATE ON agent FOR EACH ROW "
                        f"WHEN (NEW.id = '{agent_id}') EXECUTE FUNCTION refuse_row()"
                    )
                )
            else:
                conn.execute(
                    text(
                        f"CREATE TRIGGER refuse_row BEFORE UPDATE ON agent WHEN NEW.id = "
                        f"'{agent_id}' BEGIN SELECT RAISE(ABORT, 'this row is refused'); END"
                    )
                )
    finally:
        engine.dispose()


def test_a_heartbeat_the_database_refuses_never_stops_other_tenants_heartbeats(
    console: ConsoleProcess, agents: Any
) -> None:
    """The 100-character instance id is stored (its column is as long as the contract); a row
    the database refuses anyway is dropped alone, counted and logged once, while honest agents
    of both tenants keep being recorded and ``/readyz`` stays ok."""
    admin_b, token_b = _tenant_b(console)
    honest = [
        agents(console, "honest-a", console.install_token(), heartbeat="1s"),
        agents(console, "honest-b", token_b, heartbeat="1s"),
    ]
    for agent in honest:
        agent.wait_ready()
    honest_ids = [(honest[0].agent_id(), None), (honest[1].agent_id(), admin_b)]
    attacker = Identity(name=f"evil-{uuid.uuid4().hex[:6]}")
    attacker_id = attacker.enroll(console, console.install_token()).json()["agent_id"]

    def all_seen_after(mark: str) -> bool:
        return all(_agent(console, a, t)["last_seen_at"] > mark for a, t in honest_ids)

    long_id = "i" * 100
    asyncio.run(_send_beats(console, attacker, attacker_id, 10, instance_id=long_id))
    wait_for(lambda: _agent(console, attacker_id)["instance_id"] == long_id, what="stored")
    mark = datetime.now(UTC).isoformat()
    wait_for(lambda: all_seen_after(mark), timeout=15, what="honest heartbeats recorded after")

    _refuse_updates_of(console, attacker_id)
    before = _rejected(console, "heartbeat", "unwritable")
    asyncio.run(_send_beats(console, attacker, attacker_id, 30))
    mark = datetime.now(UTC).isoformat()
    wait_for(lambda: all_seen_after(mark), timeout=15, what="honest heartbeats beside refused")
    assert _rejected(console, "heartbeat", "unwritable") > before
    ready = httpx.get(f"{console.url}/readyz", timeout=5)
    assert ready.status_code == 200, ready.text
    log = console.log_path.read_text()
    assert len(re.findall(f"heartbeat from agent {attacker_id} dropped", log)) == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def _online_identity(console: ConsoleProcess, token: str) -> tuple[Identity, str]:
    ident = Identity(name=f"sim-{uuid.uuid4().hex[:6]}")
    r = ident.enroll(console, token)
    assert r.status_code in (200, 201), r.text
    agent_id = r.json()["agent_id"]
    asyncio.run(_send_beats(console, ident, agent_id, 1))
    return ident, agent_id


def _dispatched_command(
    console: ConsoleProcess, admin: str | None, agent_id: str
) -> tuple[str, str]:
    """A rollout of one agent, started, its wave dispatched: its id and the command's."""
    body = {
        "name": "one",
        "artifact": ARTIFACT,
        "start_flow": False,
        "waves": {"canary_size": 1, "percentages": [100]},
        "selector": {"agent_ids": [agent_id]},
    }
    with console.client(admin) as c:
        r = c.post("/api/v1/fleet/rollouts", json=body, timeout=30)
        assert r.status_code == 201, r.text
        rollout_id = r.json()["id"]
        assert c.post(f"/api/v1/fleet/rollouts/{rollout_id}/start", json={}).status_code == 200
        r = c.post(f"/api/v1/fleet/rollouts/{rollout_id}/waves/0/dispatch", json={})
        assert r.status_code == 200, r.text
        targets = c.get(f"/api/v1/fleet/rollouts/{rollout_id}").json()["targets"]
    (command_id,) = [t["command_id"] for t in targets if t["agent_id"] == agent_id]
    return rollout_id, str(command_id)


def _result(agent_id: str, command_id: str, new_version: Any) -> bytes:
    return json.dumps(
        {
            "command_id": command_id,
            "agent_id": agent_id,
            "kind": "self_update",
            "status": "succeeded",
            "finished_at": datetime.now(UTC).isoformat(),
            "detail": {"old_version": "0.8.0", "new_version": new_version},
        }
    ).encode()


async def _race(
    console: ConsoleProcess, hostile: tuple[Identity, str, str], good: tuple[Identity, str, str]
) -> dict[str, Any]:
    """The hostile agent floods its poisoned result while the good one is sent once; the good
    one's first answer."""
    (evil, evil_id, evil_cmd), (ident, agent_id, command_id) = hostile, good
    bad = await nats.connect(
        console.nats_url,
        **evil.nats_options(),
        inbox_prefix=subjects.agent_inbox_prefix(evil_id),
        connect_timeout=3,
    )
    nc = await nats.connect(
        console.nats_url,
        **ident.nats_options(),
        inbox_prefix=subjects.agent_inbox_prefix(agent_id),
        connect_timeout=3,
    )
    inbox = bad.new_inbox()
    try:
        poisons = [{"not": "a version"}, "1." + "0" * 63, "1." + "0" * (600 * 1024)]
        for i in range(30):
            payload = _result(evil_id, evil_cmd, poisons[i % len(poisons)])
            await bad.publish(subjects.command_result(evil_id), payload, reply=inbox)
        await bad.flush()
        flood = asyncio.gather(
            *(
                bad.publish(
                    subjects.command_result(evil_id),
                    _result(evil_id, evil_cmd, poisons[i % 2]),
                    reply=inbox,
                )
                for i in range(30)
            )
        )
        reply = await nc.request(
            subjects.command_result(agent_id), _result(agent_id, command_id, "0.9.0"), timeout=5
        )
        await flood
        answer: dict[str, Any] = json.loads(reply.data)
        return answer
    finally:
        await nc.close()
        await bad.close()


def test_a_poisoned_result_never_delays_another_tenants_result(console: ConsoleProcess) -> None:
    """A result whose ``new_version`` is an object, 65 characters or 600 KB is dropped at the
    edge and counted; the other tenant's result in the same moment is recorded on its first
    delivery."""
    admin_b, token_b = _tenant_b(console)
    evil, evil_id = _online_identity(console, console.install_token())
    good, good_id = _online_identity(console, token_b)
    evil_rollout, evil_cmd = _dispatched_command(console, None, evil_id)
    _, good_cmd = _dispatched_command(console, admin_b, good_id)
    before = _rejected(console, "result", "invalid")
    answer = asyncio.run(_race(console, (evil, evil_id, evil_cmd), (good, good_id, good_cmd)))
    assert answer["outcome"] == "recorded", answer
    assert _rejected(console, "result", "invalid") >= before + 30
    with console.client() as c:
        (target,) = c.get(f"/api/v1/fleet/rollouts/{evil_rollout}").json()["targets"]
    assert (target["status"], target.get("new_version")) == ("dispatched", None), target


def _ready(console: ConsoleProcess) -> httpx.Response:
    return httpx.get(f"{console.url}/readyz", timeout=10)


def test_readyz_fails_while_a_foreign_writer_holds_sqlite_and_recovers(
    console_factory: Any, agents: Any, tmp_path: Any
) -> None:
    """SQLite still answers ``SELECT 1`` while another process holds its write lock, so
    ``/readyz`` said ok while no heartbeat could be written; now it answers 503 with the reason
    after ``PROXIMA_READY_WRITE_FAILURE_SECONDS`` and 200 once writes commit again."""
    console = console_factory(env={"PROXIMA_READY_WRITE_FAILURE_SECONDS": "2"})
    agent = agents(console, "honest", console.install_token(), heartbeat="1s")
    agent.wait_ready()
    assert _ready(console).status_code == 200
    path = console.database_url().removeprefix("sqlite:///")
    holder = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        down = wait_for(
            lambda: (r := _ready(console)).status_code == 503 and r,
            timeout=20,
            what="/readyz to say writes fail",
        )
        body = down.json()
        assert body["reason"] == "database_unavailable", body
        assert "no agent message written" in body["checks"]["database"]["problem"], body
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    mark = datetime.now(UTC).isoformat()
    wait_for(lambda: _ready(console).status_code == 200, timeout=60, what="/readyz ok again")
    wait_for(
        lambda: _agent(console, agent.agent_id())["last_seen_at"] > mark,
        timeout=15,
        what="heartbeats recorded again",
    )


@pytest.mark.postgres
def test_readyz_fails_while_postgresql_is_stopped_and_recovers(
    console_factory: Any, own_postgres: Any, agents: Any
) -> None:
    """PostgreSQL stopped: ``/readyz`` answers 503 ``database_unavailable``; started again, 200
    and heartbeats are recorded again."""
    console = console_factory(
        database_url=own_postgres.create_database(),
        env={"PROXIMA_READY_WRITE_FAILURE_SECONDS": "2"},
    )
    agent = agents(console, "honest", console.install_token(), heartbeat="1s")
    agent.wait_ready()
    assert _ready(console).status_code == 200
    own_postgres.halt()
    try:
        down = wait_for(
            lambda: (r := _ready(console)).status_code == 503 and r,
            timeout=30,
            what="/readyz to say the database is down",
        )
        assert down.json()["reason"] == "database_unavailable"
    finally:
        own_postgres.resume()
    wait_for(lambda: _ready(console).status_code == 200, timeout=60, what="/readyz ok again")
    mark = datetime.now(UTC).isoformat()
    wait_for(
        lambda: _agent(console, agent.agent_id())["last_seen_at"] > mark,
        timeout=30,
        what="heartbeats recorded again",
    )
