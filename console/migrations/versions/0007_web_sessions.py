"""web sessions in the database; API tokens remember their parent

Revision ID: 0007_web_sessions
Revises: 0006
Create Date: 2026-12-01 16:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = '0007_web_sessions'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'web_session',
        sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('token_id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('seen_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('expires_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column('flashes', sa.JSON(), nullable=False),
        sa.Column('sealed', sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(['token_id'], ['api_token.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('web_session', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_web_session_token_id'), ['token_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_web_session_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_web_session_expires_at'), ['expires_at'], unique=False)

    with op.batch_alter_table('api_token', schema=None) as batch_op:
        batch_op.add_column(sa.Column('parent_id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))
        batch_op.create_index(batch_op.f('ix_api_token_parent_id'), ['parent_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('api_token', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_token_parent_id'))
        batch_op.drop_column('parent_id')

    with op.batch_alter_table('web_session', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_web_session_expires_at'))
        batch_op.drop_index(batch_op.f('ix_web_session_created_at'))
        batch_op.drop_index(batch_op.f('ix_web_session_token_id'))

    op.drop_table('web_session')
