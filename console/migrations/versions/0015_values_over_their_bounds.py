"""stored values over the bounds of contracts.bounds cleared, once

Consoles before the bounds stored whatever a heartbeat carried (a 900 KB version; on SQLite a
column's length is not enforced). This revision clears such values, each once: an agent's
version that is not a version (with a ``version_cleared`` event on the record saying what was
cleared; the agent's next heartbeat writes a bounded value again), an agent's over-long
instance id or cluster slug, a cluster's over-long Kubernetes version. Nothing to undo: the
downgrade leaves the data as it is.

The rules are frozen here as they stood (the version rule of ``contracts.vocabulary.versions``,
the bounds of ``console.models``): a migration never reads product code that may change later.

Revision ID: 0015_values_over_their_bounds
Revises: 0014_rate_counters
Create Date: 2026-12-05 09:00:00.000000
"""

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0015_values_over_their_bounds"
down_revision: str | None = "0014_rate_counters"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")

MAX_VERSION = 64
MAX_INSTANCE_ID = 64
MAX_SLUG = 253
_VERSION = re.compile(
    r"^v?[0-9]+(?:\.[0-9]+)?(?:\.[0-9]+)?"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)

agent = sa.table(
    "agent",
    sa.column("id", sa.String),
    sa.column("version", sa.String),
    sa.column("instance_id", sa.String),
    sa.column("cluster_slug", sa.String),
)
agent_event = sa.table(
    "agent_event",
    sa.column("agent_id", sa.String),
    sa.column("at", sqlmodel.sql.sqltypes.UTCDateTime()),
    sa.column("kind", sa.String),
    sa.column("message", sa.String),
    sa.column("detail", sa.JSON),
)
cluster = sa.table("cluster", sa.column("kubernetes_version", sa.String))


def is_version(text: str) -> bool:
    """The version rule: at most 64 characters (checked first), then the pattern."""
    stripped = text.strip()
    return len(stripped) <= MAX_VERSION and _VERSION.match(stripped) is not None


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(agent.c.id, agent.c.version).where(agent.c.version.is_not(None))
    ).all()
    bad = [(agent_id, version) for agent_id, version in rows if not is_version(version)]
    for agent_id, version in bad:
        bind.execute(sa.update(agent).where(agent.c.id == agent_id).values(version=None))
        bind.execute(
            sa.insert(agent_event).values(
                agent_id=agent_id,
                at=datetime.now(UTC),
                kind="version_cleared",
                message="the stored version was not a version (or longer than "
                f"{MAX_VERSION} characters): cleared, the next heartbeat sets it",
                detail={"length": len(version), "start": version[:32]},
            )
        )
    instance_ids = bind.execute(
        sa.update(agent)
        .where(sa.func.length(agent.c.instance_id) > MAX_INSTANCE_ID)
        .values(instance_id=None)
    ).rowcount
    slugs = bind.execute(
        sa.update(agent)
        .where(sa.func.length(agent.c.cluster_slug) > MAX_SLUG)
        .values(cluster_slug=None)
    ).rowcount
    clusters = bind.execute(
        sa.update(cluster)
        .where(sa.func.length(cluster.c.kubernetes_version) > MAX_VERSION)
        .values(kubernetes_version=None)
    ).rowcount
    cleared = {
        "agent.version": len(bad),
        "agent.instance_id": instance_ids,
        "agent.cluster_slug": slugs,
        "cluster.kubernetes_version": clusters,
    }
    if any(cleared.values()):
        log.warning("cleared stored values over their bounds: %s", cleared)


def downgrade() -> None:
    """The cleared values are gone; the schema is unchanged."""
