"""Data migrations: bad rows preloaded at the revision before, then ``upgrade head``."""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import command

from console.core.db import alembic_config

HUGE = "1." + "0" * 900_000  # a version an old Console stored from a heartbeat


def _preload(url: str, agents: dict[str, dict[str, str | None]], kubernetes: str) -> None:
    engine = sa.create_engine(url)
    when = "2026-01-01 00:00:00"
    try:
        with engine.begin() as db:
            db.execute(sa.text(f"INSERT INTO client VALUES ('c1', 'acme', '{when}')"))
            db.execute(
                sa.text(
                    "INSERT INTO environment (id, client_id, name, created_at) "
                    f"VALUES ('e1', 'c1', 'prod', '{when}')"
                )
            )
            for agent_id, values in agents.items():
                db.execute(
                    sa.text(
                        "INSERT INTO agent (id, client_id, environment_id, agent_type, name, "
                        "can_self_update, labels, enrolled_at, conflict_count, version, "
                        "instance_id, cluster_slug) VALUES (:id, 'c1', 'e1', 'host', :id, "
                        f"true, '{{}}', '{when}', 0, :version, :instance_id, :cluster_slug)"
                    ),
                    {"id": agent_id, **values},
                )
            db.execute(
                sa.text(
                    "INSERT INTO cluster (id, client_id, environment_id, slug, name, registered, "
                    "created_at, counts, truncated, errors, inventory_problems, "
                    "kubernetes_version) VALUES ('k1', 'c1', 'e1', 'eu', 'eu', true, "
                    f"'{when}', '{{}}', '{{}}', '[]', '[]', :version)"
                ),
                {"version": kubernetes},
            )
    finally:
        engine.dispose()


def test_values_over_their_bounds_are_cleared_once_by_a_migration(database_url):
    """The Console cleared stored values over their bounds at every start, outside Alembic
    (a start-time repair service); revision 0015 clears them once, with the same event."""
    url = database_url
    command.upgrade(alembic_config(url), "0014_rate_counters")
    sqlite = url.startswith("sqlite")  # PostgreSQL enforces a column's length; SQLite does not
    good = {"version": "0.9.1", "instance_id": "i-1", "cluster_slug": "eu"}
    agents = {
        "good": good,
        "garbled": {**good, "version": "not a version!"},
    }
    if sqlite:
        agents["huge"] = {**good, "version": HUGE, "instance_id": "i" * 65}
        agents["slug"] = {**good, "cluster_slug": "s" * 254}
    _preload(url, agents, kubernetes="v" * 65 if sqlite else "v1.31.0")

    command.upgrade(alembic_config(url), "head")

    engine = sa.create_engine(url)
    try:
        with engine.connect() as db:
            rows = {
                r.id: (r.version, r.instance_id, r.cluster_slug)
                for r in db.execute(sa.text("SELECT * FROM agent"))
            }
            events = db.execute(
                sa.text("SELECT agent_id, kind, detail FROM agent_event ORDER BY agent_id")
            ).all()
            kubernetes = db.execute(sa.text("SELECT kubernetes_version FROM cluster")).scalar()
    finally:
        engine.dispose()
    assert rows["good"] == ("0.9.1", "i-1", "eu"), "a value within its bounds is kept"
    assert rows["garbled"] == (None, "i-1", "eu")
    cleared = {"garbled"}
    if sqlite:
        assert rows["huge"] == (None, None, "eu")
        assert rows["slug"] == ("0.9.1", "i-1", None)
        assert kubernetes is None
        cleared.add("huge")
    else:
        assert kubernetes == "v1.31.0"
    assert {agent_id for agent_id, kind, _ in events if kind == "version_cleared"} == cleared
    for agent_id, _, detail in events:
        detail = detail if isinstance(detail, dict) else json.loads(detail)
        assert detail["length"] == len(agents[agent_id]["version"] or "")
        assert detail["start"] == (agents[agent_id]["version"] or "")[:32]
