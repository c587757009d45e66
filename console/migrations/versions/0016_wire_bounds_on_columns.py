"""columns as long as the wire bounds that fill them (contracts.bounds)

agent.instance_id takes the 128 characters of an Identifier (it was 64: on PostgreSQL a longer
instance id in one heartbeat failed the whole batch), rollout_target.error the 4,096 of a
result's error text (it was 2,048, cut in the Console).

Revision ID: 0016_wire_bounds_on_columns
Revises: 0015_values_over_their_bounds
Create Date: 2026-12-05 09:00:00.000000
"""

from collections.abc import Sequence

import sqlmodel
from alembic import op


revision: str = '0016_wire_bounds_on_columns'
down_revision: str | None = '0015_values_over_their_bounds'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STRING = sqlmodel.sql.sqltypes.AutoString

# (table, column, length before, length now)
_WIDENED = (
    ('agent', 'instance_id', 64, 128),
    ('rollout_target', 'error', 2048, 4096),
)


def upgrade() -> None:
    for table, column, before, now in _WIDENED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(
                column,
                existing_type=_STRING(length=before),
                type_=_STRING(length=now),
                existing_nullable=True,
            )


def downgrade() -> None:
    # Values longer than the old length are cut first (PostgreSQL refuses to shorten past them).
    for table, column, before, now in _WIDENED:
        op.execute(
            f'UPDATE {table} SET {column} = substr({column}, 1, {before}) '  # noqa: S608
            f'WHERE length({column}) > {before}'
        )
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(
                column,
                existing_type=_STRING(length=now),
                type_=_STRING(length=before),
                existing_nullable=True,
            )
