"""indexes for the fleet list filtered in SQL and for the timeout sweep; leases for the
background work of several Console replicas; a rollout's lost driver

Revision ID: 0010_fleet_indexes
Revises: 0009_unique_keys
Create Date: 2026-12-01 18:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0010_fleet_indexes'
down_revision: str | None = '0009_unique_keys'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'lease',
        sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('holder', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('acquired_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    with op.batch_alter_table('rollout', schema=None) as batch_op:
        batch_op.add_column(sa.Column('driver_lost_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('driver_lost_reason', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True))
        batch_op.add_column(sa.Column('driver_lost_detail', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=True))
    with op.batch_alter_table('agent', schema=None) as batch_op:
        # covers the status conditions (revoked, released, last sign of life): counted from
        # the index alone
        batch_op.create_index(
            'ix_agent_env_last_seen',
            ['environment_id', 'last_seen_at', 'revoked_at', 'nats_public_key'],
        )
        batch_op.create_index('ix_agent_env_version', ['environment_id', 'version'])
    with op.batch_alter_table('rollout_target', schema=None) as batch_op:
        batch_op.create_index('ix_rollout_target_status_deadline', ['status', 'deadline_at'])


def downgrade() -> None:
    with op.batch_alter_table('rollout_target', schema=None) as batch_op:
        batch_op.drop_index('ix_rollout_target_status_deadline')
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_env_version')
        batch_op.drop_index('ix_agent_env_last_seen')
    op.drop_table('lease')
    with op.batch_alter_table('rollout', schema=None) as batch_op:
        batch_op.drop_column('driver_lost_detail')
        batch_op.drop_column('driver_lost_reason')
        batch_op.drop_column('driver_lost_at')
