"""Version poisoning, against a real Console, real NATS and a real agent.

What broke: a heartbeat ``version`` of 4,301 digits made every ``POST /api/v1/fleet/rollouts``
of its environment answer 500 (``int()`` raised a bare ``ValueError`` in version parsing), and
it survived revoking the agent: no API could repair it. A 900 KB version was stored and served
in every fleet list.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime

import httpx
import nats
from sqlalchemy import update
from sqlmodel import create_engine

from console.models import Agent
from contracts import subjects
from testkit.console import ConsoleProcess, Identity
from testkit.rollouts import create_rollout
from testkit.waiting import wait_for

HUGE = "9" * 4301
BIG = "1." + "0" * (900 * 1024)


def _rejected(console: ConsoleProcess) -> float:
    text = httpx.get(f"{console.url}/metrics", timeout=5).text
    series = r'proxima_messages_rejected_total\{kind="heartbeat",reason="invalid"\}'
    match = re.search(series + r" ([0-9.e+]+)", text)
    return float(match.group(1)) if match else 0.0


async def _heartbeats(console: ConsoleProcess, ident: Identity, agent_id: str, versions) -> None:
    nc = await nats.connect(console.nats_url, **ident.nats_options())
    try:
        for version in versions:
            beat = {
                "agent_id": agent_id,
                "instance_id": ident.instance_id,
                "agent_type": "host",
                "version": version,
                "sent_at": datetime.now(UTC).isoformat(),
                "uptime_seconds": 1,
                "heartbeat_interval_seconds": 30,
            }
            await nc.publish(subjects.heartbeat(agent_id), json.dumps(beat).encode())
        await nc.flush()
    finally:
        await nc.close()


def test_a_poisoned_heartbeat_version_is_dropped_and_rollouts_are_still_created(
    console: ConsoleProcess, agents
) -> None:
    real = agents(console, "real-host", console.install_token())
    real.wait_ready()
    real_id = real.agent_id()
    attacker = Identity(name=f"evil-{uuid.uuid4().hex[:6]}")
    attacker_id = attacker.enroll(console, console.install_token()).json()["agent_id"]
    before = _rejected(console)
    asyncio.run(_heartbeats(console, attacker, attacker_id, [HUGE, BIG, "0.8.1"]))
    wait_for(lambda: console.agent(attacker_id)["version"] == "0.8.1", what="the good heartbeat")
    assert _rejected(console) >= before + 2, "both poisoned heartbeats dropped, counted"
    with console.client() as c:
        listed = c.get("/api/v1/fleet/agents")
        assert listed.status_code == 200 and len(listed.content) < 100_000
    rollout = create_rollout(console, selector={"agent_ids": [real_id, attacker_id]})
    assert {t["agent_id"] for t in rollout["targets"] or []} | {
        e["agent_id"] for e in rollout["exclusions"]
    } == {real_id, attacker_id}
    # Enrollment holds the same rule.
    late = Identity(name=f"late-{uuid.uuid4().hex[:6]}")
    r = late.enroll(console, console.install_token(), version=HUGE)
    assert (r.status_code, r.json()["reason"]) == (422, "invalid_request")


def test_a_version_already_stored_poisoned_is_unknown(console: ConsoleProcess, agents) -> None:
    """Data written by a Console before the bounds: rollouts still work with it in place and the
    agent lists with an unknown version (the migration that clears it once:
    ``tests/console/test_migrations.py``)."""
    real = agents(console, "real-host", console.install_token())
    real.wait_ready()
    real_id = real.agent_id()
    victim = Identity(name=f"old-{uuid.uuid4().hex[:6]}")
    victim_id = victim.enroll(console, console.install_token()).json()["agent_id"]
    url = console.env.get("PROXIMA_DATABASE_URL") or (
        f"sqlite:///{(console.data_dir / 'console.db').resolve()}"
    )
    # PostgreSQL enforces the column's 64 characters; SQLite stored anything.
    poison = "not a version!" if url.startswith("postgresql") else HUGE
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Agent).where(Agent.id == victim_id).values(version=poison))
    finally:
        engine.dispose()
    assert console.agent(victim_id)["version"] is None, "unparseable: shown as unknown"
    rollout = create_rollout(console, selector={"agent_ids": [real_id, victim_id]})
    excluded = {e["agent_id"]: e for e in rollout["exclusions"]}
    assert victim_id in excluded, rollout
