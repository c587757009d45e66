"""Heartbeats, metrics and refused connections, written in batches by ``console.ingest``.

Shared identity: every agent process sends a random ``instance_id``. A restart changes it once
(A A A B B B); two live processes on one identity alternate (A B A B). An instance that comes
back after another one has spoken, within two heartbeat intervals, flags the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, update
from sqlmodel import Session

from console.core.clock import utcnow
from console.core.db import PLACEHOLDERS, bind_processor
from console.models import Agent, AgentEvent, NatsRevocation, table_of
from contracts.messages import Heartbeat, HostMetrics


@dataclass(slots=True)
class _Seen:
    last_instance: str | None = None
    instances: dict[str, tuple[float, str]] = field(default_factory=dict)
    shared: bool = False
    flapping: bool = False


@dataclass(frozen=True, slots=True)
class IdentityChange:
    agent_id: str
    shared: bool
    flapping: bool
    instances: tuple[str, ...]
    versions: tuple[str, ...]


class InstanceTracker:
    """Detects two live processes heartbeating as one identity (see module docstring)."""

    def __init__(self, *, slack_seconds: float = 1.0) -> None:
        self._seen: dict[str, _Seen] = {}
        self._slack = slack_seconds

    def observe(
        self, agent_id: str, instance_id: str, version: str, interval: float, now: float
    ) -> IdentityChange | None:
        state = self._seen.get(agent_id)
        if state is None:
            state = self._seen[agent_id] = _Seen()
        elif instance_id == state.last_instance and not state.shared and len(state.instances) == 1:
            # The common case, one process beating as itself: nothing to prune (its only
            # instance is the one speaking now) and nothing changes.
            state.instances[instance_id] = (now, version)
            return None
        window = 2 * max(interval, 0.05) + self._slack
        for inst, (t, _v) in list(state.instances.items()):
            if now - t > window:
                del state.instances[inst]
        alternated = (
            state.last_instance is not None
            and instance_id != state.last_instance
            and instance_id in state.instances
        )
        state.instances[instance_id] = (now, version)
        state.last_instance = instance_id
        shared = state.shared
        if alternated:
            shared = True
        elif len(state.instances) == 1:
            shared = False
        versions = tuple(sorted({v for _t, v in state.instances.values()}))
        flapping = shared and len(versions) > 1
        if shared != state.shared or flapping != state.flapping:
            state.shared, state.flapping = shared, flapping
            return IdentityChange(
                agent_id, shared, flapping, tuple(sorted(state.instances)), versions
            )
        return None

    def forget(self, agent_id: str) -> None:
        self._seen.pop(agent_id, None)


def record_heartbeats(
    session: Session,
    latest: dict[str, Heartbeat],
    metrics: dict[str, HostMetrics],
    changes: list[IdentityChange],
) -> None:
    """One UPDATE per agent for the batch's latest heartbeats and metrics; flags and events
    for identities that started or stopped being shared."""
    now: datetime = utcnow()
    _update_heartbeats(session, latest, now)
    _update_metrics(session, metrics)
    _record_changes(session, changes, now)


# The per-heartbeat columns; ``version`` and ``cluster_slug`` are indexed, so they have their
# own guarded statement below that writes a row only when they changed (an indexed column in an
# UPDATE's SET costs an index rewrite even when its value is the same).
_HOT_COLUMNS = (
    "last_seen_at",
    "last_heartbeat_at",
    "instance_id",
    "uptime_seconds",
    "heartbeat_interval_seconds",
    "metrics_interval_seconds",
    "sync_interval_seconds",
    "can_self_update",
    "self_update_blocker",
    "leader",
)


def _update_heartbeats(session: Session, latest: dict[str, Heartbeat], now: datetime) -> None:
    """Two ``executemany`` statements in the driver's own parameter style, their values
    converted once per batch where they are the same for every row (the instant, booleans),
    in primary-key order: at 100,000 agents each heartbeat is its own row, and the ORM's
    per-row bind processing cost more than SQLite's work (docs/performance.md)."""
    if not latest:
        return
    conn = session.connection()
    dialect = conn.dialect
    if dialect.name == "postgresql":
        _update_heartbeats_postgres(conn, latest, now)
        return
    mark = PLACEHOLDERS.get(dialect.paramstyle)
    if mark is None:  # a driver style this fast path does not know: the portable statement
        _update_heartbeats_core(session, latest, now)
        return
    cols = table_of(Agent).c
    seen = _bind(cols.last_seen_at, dialect)(now)
    flag = _bind(cols.can_self_update, dialect)
    maybe = {True: flag(True), False: flag(False), None: None}
    hot, indexed = [], []
    for agent_id in sorted(latest):
        hb = latest[agent_id]
        blocker = None
        if not hb.can_self_update and hb.self_update_blocker is not None:
            blocker = hb.self_update_blocker.value
        hot.append(
            (
                seen,
                seen,
                hb.instance_id,
                hb.uptime_seconds,
                hb.heartbeat_interval_seconds,
                hb.metrics_interval_seconds,
                hb.sync_interval_seconds,
                maybe[hb.can_self_update],
                blocker,
                maybe[hb.leader],
                agent_id,
            )
        )
        indexed.append((hb.version, hb.cluster_slug, agent_id, hb.version, hb.cluster_slug))
    hot_sql, indexed_sql = _statements(mark, dialect.name == "sqlite")
    conn.exec_driver_sql(hot_sql, hot)
    conn.exec_driver_sql(indexed_sql, indexed)


# PostgreSQL: the batch as one statement over arrays (``unnest``), not one per row. Every
# heartbeat moves ``last_seen_at``, which an index holds, so no update here is a HOT one: the
# row's new version gets an entry in every index whatever else changed, and ``version`` and
# ``cluster_slug`` (also indexed) are written in the same statement. On SQLite the per-row
# statements above stay: its driver's ``executemany`` is already one prepared statement in C.
_POSTGRES_UPDATE = (
    "UPDATE agent SET last_seen_at = %(seen)s, last_heartbeat_at = %(seen)s, "
    "instance_id = v.instance_id, uptime_seconds = v.uptime, "
    "heartbeat_interval_seconds = v.hb, metrics_interval_seconds = v.metrics, "
    "sync_interval_seconds = v.sync, can_self_update = v.can_update, "
    "self_update_blocker = v.blocker, leader = v.leader, version = v.version, "
    "cluster_slug = v.slug "
    "FROM unnest(%(ids)s::varchar[], %(instances)s::varchar[], %(uptimes)s::float8[], "
    "%(hbs)s::float8[], %(metrics)s::float8[], %(syncs)s::float8[], %(can)s::bool[], "
    "%(blockers)s::varchar[], %(leaders)s::bool[], %(versions)s::varchar[], "
    "%(slugs)s::varchar[]) "
    "AS v(id, instance_id, uptime, hb, metrics, sync, can_update, blocker, leader, version, slug) "
    "WHERE agent.id = v.id AND agent.revoked_at IS NULL"
)


def _update_heartbeats_postgres(conn: Any, latest: dict[str, Heartbeat], now: datetime) -> None:
    ids = sorted(latest)  # primary-key order, as the per-row path: rows locked in one order
    beats = [latest[agent_id] for agent_id in ids]
    conn.exec_driver_sql(
        _POSTGRES_UPDATE,
        {
            "seen": now,
            "ids": ids,
            "instances": [hb.instance_id for hb in beats],
            "uptimes": [hb.uptime_seconds for hb in beats],
            "hbs": [hb.heartbeat_interval_seconds for hb in beats],
            "metrics": [hb.metrics_interval_seconds for hb in beats],
            "syncs": [hb.sync_interval_seconds for hb in beats],
            "can": [hb.can_self_update for hb in beats],
            "blockers": [
                None
                if hb.can_self_update or hb.self_update_blocker is None
                else hb.self_update_blocker.value
                for hb in beats
            ],
            "leaders": [hb.leader for hb in beats],
            "versions": [hb.version for hb in beats],
            "slugs": [hb.cluster_slug for hb in beats],
        },
    )


@cache
def _statements(mark: str, sqlite: bool) -> tuple[str, str]:
    """The two statements' text: only this module's constants go into it (values are bound)."""
    assignments = ", ".join(f"{c} = {mark}" for c in _HOT_COLUMNS)
    differs = "IS NOT" if sqlite else "IS DISTINCT FROM"
    where = f"WHERE id = {mark} AND revoked_at IS NULL"
    return (
        f"UPDATE agent SET {assignments} {where}",  # noqa: S608
        f"UPDATE agent SET version = {mark}, cluster_slug = {mark} {where} "  # noqa: S608
        f"AND (version {differs} {mark} OR cluster_slug {differs} {mark})",
    )


def _bind(column: Any, dialect: Any) -> Callable[[Any], Any]:
    """The column's conversion as SQLAlchemy binds it (``db.bind_processor``): on SQLite an
    instant is written as the same text the ORM writes, not the driver's own format."""
    process = bind_processor(column, dialect)
    return process if process is not None else (lambda value: value)


def _update_heartbeats_core(session: Session, latest: dict[str, Heartbeat], now: datetime) -> None:
    table = table_of(Agent)
    rows = [
        {
            "b_id": agent_id,
            "b_seen": now,
            "b_version": hb.version,
            "b_instance": hb.instance_id,
            "b_uptime": hb.uptime_seconds,
            "b_hb": hb.heartbeat_interval_seconds,
            "b_metrics": hb.metrics_interval_seconds,
            "b_sync": hb.sync_interval_seconds,
            "b_self_update": hb.can_self_update,
            "b_blocker": None
            if hb.can_self_update or hb.self_update_blocker is None
            else hb.self_update_blocker.value,
            "b_slug": hb.cluster_slug,
            "b_leader": hb.leader,
        }
        for agent_id, hb in latest.items()
    ]
    stmt = (
        update(table)
        .where(table.c.id == bindparam("b_id"))
        .where(table.c.revoked_at.is_(None))
        .values(
            last_seen_at=bindparam("b_seen"),
            last_heartbeat_at=bindparam("b_seen"),
            version=bindparam("b_version"),
            instance_id=bindparam("b_instance"),
            uptime_seconds=bindparam("b_uptime"),
            heartbeat_interval_seconds=bindparam("b_hb"),
            metrics_interval_seconds=bindparam("b_metrics"),
            sync_interval_seconds=bindparam("b_sync"),
            can_self_update=bindparam("b_self_update"),
            self_update_blocker=bindparam("b_blocker"),
            cluster_slug=bindparam("b_slug"),
            leader=bindparam("b_leader"),
        )
    )
    session.connection().execute(stmt, rows)


def _update_metrics(session: Session, metrics: dict[str, HostMetrics]) -> None:
    table = table_of(Agent)
    if not metrics:
        return
    session.connection().execute(
        update(table).where(table.c.id == bindparam("b_id")).values(last_metrics=bindparam("b_m")),
        [
            {"b_id": agent_id, "b_m": m.model_dump(mode="json", exclude={"agent_id"})}
            for agent_id, m in metrics.items()
        ],
    )


def _record_changes(session: Session, changes: list[IdentityChange], now: datetime) -> None:
    for change in changes:
        agent = session.get(Agent, change.agent_id)
        if agent is None:
            continue
        if change.shared and agent.shared_identity_since is None:
            agent.shared_identity_since = now
            session.add(
                AgentEvent(
                    agent_id=agent.id,
                    kind="shared_identity",
                    message=f"{len(change.instances)} processes heartbeat as this identity",
                    detail={
                        "instances": list(change.instances),
                        "versions": list(change.versions),
                    },
                )
            )
        elif not change.shared and agent.shared_identity_since is not None:
            agent.shared_identity_since = None
            session.add(
                AgentEvent(
                    agent_id=agent.id,
                    kind="shared_identity_cleared",
                    message="one process heartbeats as this identity again",
                    detail={},
                )
            )
        if change.flapping and agent.version_flapping_since is None:
            agent.version_flapping_since = now
            session.add(
                AgentEvent(
                    agent_id=agent.id,
                    kind="version_flapping",
                    message="reported version flaps between " + ", ".join(change.versions),
                    detail={"versions": list(change.versions)},
                )
            )
        elif not change.flapping:
            agent.version_flapping_since = None
        session.add(agent)


def record_refused(session: Session, refused: dict[str, int]) -> None:
    """Count connections the server refused for keys the Console took away."""
    now = utcnow()
    for public_key, count in refused.items():
        row = session.get(NatsRevocation, public_key)
        if row is None:
            continue  # a stranger's key: nothing of ours
        row.refused_attempts += count
        row.last_refused_at = now
        session.add(row)
