"""A heartbeat's instant is stored as the ORM stores every other instant (what broke:
the heartbeat fast path took the generic column type's conversion, so SQLite's driver wrote
``… 01:32:37.571139+00:00`` beside the ORM's ``… 01:32:37.571139`` in the same column; SQLite
compares that text as text, in every "seen since" filter)."""

from __future__ import annotations

import re

from sqlalchemy import text

from testkit.services import InProcessConsole

SQLITE_INSTANT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")


async def test_last_seen_is_written_in_the_orms_text(services: InProcessConsole) -> None:
    agent_id = (await services.add_agents(1)).popitem()[1]
    services.clock.advance(5)
    await services.heartbeat(agent_id)

    def stored(uow) -> tuple[str, str, str]:
        row = uow.session.execute(
            text("SELECT enrolled_at, last_seen_at, last_heartbeat_at FROM agent WHERE id = :i"),
            {"i": agent_id},
        ).one()
        return tuple(row)

    enrolled, seen, beat = await services.run(stored)
    assert SQLITE_INSTANT.match(enrolled), enrolled  # the ORM's text
    assert SQLITE_INSTANT.match(seen), seen
    assert SQLITE_INSTANT.match(beat), beat
    assert seen > enrolled


def test_a_batch_writes_each_heartbeat_to_its_own_row_and_never_a_revoked_one(
    database_url: str,
) -> None:
    """The batch write on both databases (PostgreSQL has its own statement: one over arrays):
    every field of every heartbeat lands on its agent's row, the instant as the ORM reads it
    back, and a revoked record is left as it was."""
    from datetime import UTC, datetime

    from sqlalchemy import insert
    from sqlmodel import Session, select

    from console.bootstrap import bootstrap
    from console.core.db import make_engine, migrate
    from console.models import Agent, table_of
    from console.services.heartbeats import record_heartbeats
    from contracts.messages import Heartbeat
    from testkit.preload import agent_row

    migrate(database_url)
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            info = bootstrap(session, client_name="acme", environment_name="prod")
        enrolled = datetime(2026, 1, 1, tzinfo=UTC)
        ids = [f"agent{i:02d}" for i in range(5)]
        with engine.begin() as conn:
            conn.execute(
                insert(table_of(Agent)),
                [
                    agent_row(
                        agent_id=agent_id,
                        client_id=info.client_id,
                        environment_id=info.environment_id,
                        name=f"host-{agent_id}",
                        public_key=f"U{i:055d}",
                        enrolled_at=enrolled,
                        last_seen_at=enrolled,
                        revoked_at=enrolled if agent_id == "agent04" else None,
                    )
                    for i, agent_id in enumerate(ids)
                ],
            )
        beats = {
            agent_id: Heartbeat(
                agent_id=agent_id,
                instance_id=f"inst-{agent_id}",
                agent_type="host",
                version=f"0.9.{i}",
                sent_at=datetime.now(UTC),
                uptime_seconds=10.5 * i,
                heartbeat_interval_seconds=30,
                metrics_interval_seconds=None if i % 2 else 60,
                sync_interval_seconds=300 if i == 1 else None,
                can_self_update=i != 2,
                self_update_blocker="read_only_program" if i == 2 else None,
                leader={0: None, 1: True}.get(i, False),
                cluster_slug="edge" if i == 3 else None,
            )
            for i, agent_id in enumerate(ids)
        }
        before = datetime.now(UTC).replace(tzinfo=None)
        with Session(engine) as session:
            record_heartbeats(session, beats, {}, [])
            session.commit()
        after = datetime.now(UTC).replace(tzinfo=None)
        with Session(engine) as session:
            rows = {a.id: a for a in session.exec(select(Agent).where(Agent.id.in_(ids)))}
    finally:
        engine.dispose()

    revoked = rows.pop("agent04")
    assert (revoked.version, revoked.instance_id) == ("0.8.0", None), "a revoked record is kept"
    for agent_id, row in rows.items():
        hb = beats[agent_id]
        seen = row.last_seen_at.replace(tzinfo=None)
        assert before <= seen <= after, (seen, before, after)
        assert row.last_heartbeat_at == row.last_seen_at
        assert (
            row.instance_id,
            row.version,
            row.uptime_seconds,
            row.heartbeat_interval_seconds,
            row.metrics_interval_seconds,
            row.sync_interval_seconds,
            row.can_self_update,
            row.self_update_blocker,
            row.leader,
            row.cluster_slug,
        ) == (
            hb.instance_id,
            hb.version,
            hb.uptime_seconds,
            hb.heartbeat_interval_seconds,
            hb.metrics_interval_seconds,
            hb.sync_interval_seconds,
            hb.can_self_update,
            None if hb.can_self_update else "read_only_program",
            hb.leader,
            hb.cluster_slug,
        ), agent_id
