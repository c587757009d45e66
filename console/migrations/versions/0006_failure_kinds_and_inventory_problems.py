"""failure kinds, self-update blockers and inventory problems as facts

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 15:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.add_column(sa.Column('self_update_blocker', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))

    with op.batch_alter_table('rollout_target', schema=None) as batch_op:
        batch_op.add_column(sa.Column('failure_kind', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))

    with op.batch_alter_table('cluster', schema=None) as batch_op:
        batch_op.add_column(sa.Column('inventory_problems', sa.JSON(), nullable=False, server_default='[]'))


def downgrade() -> None:
    with op.batch_alter_table('cluster', schema=None) as batch_op:
        batch_op.drop_column('inventory_problems')

    with op.batch_alter_table('rollout_target', schema=None) as batch_op:
        batch_op.drop_column('failure_kind')

    with op.batch_alter_table('agent', schema=None) as batch_op:
        batch_op.drop_column('self_update_blocker')
