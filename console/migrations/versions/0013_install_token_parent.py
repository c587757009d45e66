"""install tokens remember the API token that minted them

Revoking an API token (or one above it) revokes the install tokens it minted. Install tokens
made before this revision have no recorded parent (``parent_id`` NULL): revoke them by hand.

Revision ID: 0013_install_token_parent
Revises: 0012_nats_accounts
Create Date: 2026-12-01 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op


revision: str = "0013_install_token_parent"
down_revision: str | None = "0012_nats_accounts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("install_token", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("parent_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True)
        )
        batch_op.create_index(batch_op.f("ix_install_token_parent_id"), ["parent_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("install_token", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_install_token_parent_id"))
        batch_op.drop_column("parent_id")
