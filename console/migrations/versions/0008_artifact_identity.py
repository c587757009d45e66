"""one artifact per (environment, version, sha256); rows with an invalid version removed

Before this revision a version of any length and any form was stored (a 65-character one made
``GET /api/v1/artifacts`` answer 500), and the same build uploaded twice made two rows. This
revision repairs such data, then adds the unique constraint: rows whose version breaks the
fleet's rule are deleted, and of duplicates the oldest is kept. Rollouts keep their own copy of
the artifact reference, so none loses its build's description; the stored files (named by
sha256) are kept.

Revision ID: 0008_artifact_identity
Revises: 0006
Create Date: 2026-12-01 16:40:00.000000
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_artifact_identity"
down_revision: str | None = "0007_web_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The rule of rollout_policy/versions.py and contracts (1-64 characters), frozen here.
_VERSION = re.compile(
    r"^v?\d+(?:\.\d+)?(?:\.\d+)?"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


def _valid(version: str | None) -> bool:
    return version is not None and 1 <= len(version) <= 64 and bool(_VERSION.match(version.strip()))


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, environment_id, version, sha256 FROM artifact ORDER BY created_at, id"
        )
    ).all()
    seen: set[tuple[str, str, str]] = set()
    doomed: list[str] = []
    for row_id, environment_id, version, sha256 in rows:
        key = (environment_id, version, sha256)
        if not _valid(version) or key in seen:
            doomed.append(row_id)
        seen.add(key)
    for row_id in doomed:
        bind.execute(sa.text("DELETE FROM artifact WHERE id = :id"), {"id": row_id})
    with op.batch_alter_table("artifact", schema=None) as batch_op:
        batch_op.create_unique_constraint(
            "uq_artifact_identity", ["environment_id", "version", "sha256"]
        )


def downgrade() -> None:
    with op.batch_alter_table("artifact", schema=None) as batch_op:
        batch_op.drop_constraint("uq_artifact_identity", type_="unique")
