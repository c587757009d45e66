"""rate-limit counters in the database, shared by every Console replica

Revision ID: 0014_rate_counters
Revises: 0013_install_token_parent
Create Date: 2026-12-01 18:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0014_rate_counters'
down_revision: str | None = '0013_install_token_parent'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'rate_counter',
        sa.Column('key', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('slot', sa.BigInteger(), nullable=False),
        sa.Column('count', sa.Integer(), nullable=False),
        sa.Column('previous', sa.Integer(), nullable=False),
        sa.Column('expires_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('key'),
    )
    with op.batch_alter_table('rate_counter', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rate_counter_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('rate_counter', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rate_counter_expires_at'))
    op.drop_table('rate_counter')
