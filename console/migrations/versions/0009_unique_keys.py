"""public keys unique across all records; agents remember when they were re-bound

A key held by more than one record (possible before: a captured enrollment re-sent with another
tenant's install token) stays with the record enrolled first; the later copies are released
(their key cleared, ``released_at`` set) and get a history event saying why.

Revision ID: 0009_unique_keys
Revises: 0006
Create Date: 2026-12-01 17:00:00.000000
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0009_unique_keys'
down_revision: str | None = '0008_artifact_identity'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_agent = sa.table(
    'agent',
    sa.column('id', sa.String),
    sa.column('nats_public_key', sa.String),
    sa.column('enrolled_at', sqlmodel.sql.sqltypes.UTCDateTime()),
    sa.column('released_at', sqlmodel.sql.sqltypes.UTCDateTime()),
)
_event = sa.table(
    'agent_event',
    sa.column('agent_id', sa.String),
    sa.column('at', sqlmodel.sql.sqltypes.UTCDateTime()),
    sa.column('kind', sa.String),
    sa.column('message', sa.String),
    sa.column('detail', sa.JSON),
)


def _release_duplicate_keys() -> None:
    bind = op.get_bind()
    now = datetime.now(UTC)
    shared = (
        sa.select(_agent.c.nats_public_key)
        .where(_agent.c.nats_public_key.is_not(None))
        .group_by(_agent.c.nats_public_key)
        .having(sa.func.count() > 1)
    )
    rows = bind.execute(
        sa.select(_agent.c.id, _agent.c.nats_public_key)
        .where(_agent.c.nats_public_key.in_(shared))
        .order_by(_agent.c.nats_public_key, _agent.c.enrolled_at, _agent.c.id)
    ).all()
    kept: set[str] = set()
    for agent_id, key in rows:
        if key not in kept:
            kept.add(key)
            continue
        bind.execute(
            _agent.update()
            .where(_agent.c.id == agent_id)
            .values(nats_public_key=None, released_at=now)
        )
        bind.execute(
            _event.insert().values(
                agent_id=agent_id,
                at=now,
                kind='released',
                message='released by the upgrade: its public key was also held by a record '
                'enrolled earlier (keys are unique now)',
                detail={'actor': 'migration 0009_unique_keys'},
            )
        )


def upgrade() -> None:
    _release_duplicate_keys()
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.add_column(sa.Column('rebound_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.drop_index('ix_agent_nats_public_key')
        batch_op.create_index('ix_agent_nats_public_key', ['nats_public_key'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_nats_public_key')
        batch_op.create_index('ix_agent_nats_public_key', ['nats_public_key'], unique=False)
        batch_op.drop_column('rebound_at')
