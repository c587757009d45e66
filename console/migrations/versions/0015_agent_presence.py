"""what every heartbeat rewrites (last sign of life, last heartbeat, uptime) moves out of the
wide agent row into a narrow agent_presence row (WITHOUT ROWID on SQLite), with the values of
every record copied

Revision ID: 0015_agent_presence
Revises: 0014_rate_counters
Create Date: 2026-12-02 01:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0015_agent_presence'
down_revision: str | None = '0014_rate_counters'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'agent_presence',
        sa.Column('agent_id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column('last_seen_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column('last_heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column('uptime_seconds', sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(['agent_id'], ['agent.id']),
        sa.PrimaryKeyConstraint('agent_id'),
        sqlite_with_rowid=False,
    )
    op.execute(
        'INSERT INTO agent_presence (agent_id, last_seen_at, last_heartbeat_at, uptime_seconds) '
        'SELECT id, last_seen_at, last_heartbeat_at, uptime_seconds FROM agent'
    )
    with op.batch_alter_table('agent_presence', schema=None) as batch_op:
        batch_op.create_index('ix_agent_presence_last_seen_at', ['last_seen_at'], unique=False)
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_env_last_seen')
        batch_op.drop_column('uptime_seconds')
        batch_op.drop_column('last_heartbeat_at')
        batch_op.drop_column('last_seen_at')


def downgrade() -> None:
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_seen_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('last_heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('uptime_seconds', sa.Float(), nullable=True))
    op.execute(
        'UPDATE agent SET '
        'last_seen_at = (SELECT p.last_seen_at FROM agent_presence p WHERE p.agent_id = agent.id), '
        'last_heartbeat_at = (SELECT p.last_heartbeat_at FROM agent_presence p WHERE p.agent_id = agent.id), '
        'uptime_seconds = (SELECT p.uptime_seconds FROM agent_presence p WHERE p.agent_id = agent.id)'
    )
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.create_index(
            'ix_agent_env_last_seen',
            ['environment_id', 'last_seen_at', 'revoked_at', 'nats_public_key'],
        )
    with op.batch_alter_table('agent_presence', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_presence_last_seen_at')
    op.drop_table('agent_presence')
