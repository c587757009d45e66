"""NATS keys held once in the database: operator, system account, one account per environment

Revision ID: 0012_nats_accounts
Revises: 0011_artifact_blobs
Create Date: 2026-12-01 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0012_nats_accounts'
down_revision: str | None = '0011_artifact_blobs'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'nats_account',
        sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('environment_id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column('public_key', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('seed', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(['environment_id'], ['environment.id']),
        sa.PrimaryKeyConstraint('name'),
        sa.UniqueConstraint('public_key'),
    )
    with op.batch_alter_table('nats_account', schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f('ix_nats_account_environment_id'), ['environment_id'], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table('nats_account', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_nats_account_environment_id'))
    op.drop_table('nats_account')
