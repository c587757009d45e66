"""hosted builds in the database (chunked), so that every Console replica serves them; the
builds already on this Console's disk are imported

The import reads ``<data_dir>/artifacts/<sha256>`` for every hosted artifact, where
``data_dir`` is the one the Console migrates with (``console.core.db.migrate``), else
``PROXIMA_DATA_DIR``, else the SQLite file's directory. A file whose SHA-256 is not its name is
left out and logged (its download keeps answering 404 ``artifact_missing``); the files stay on
disk (delete ``<data_dir>/artifacts`` once every replica runs this revision).

Revision ID: 0011_artifact_blobs
Revises: 0010_fleet_indexes
Create Date: 2026-12-01 19:10:00.000000
"""

import hashlib
import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
import sqlmodel
from alembic import context, op


revision: str = '0011_artifact_blobs'
down_revision: str | None = '0010_fleet_indexes'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger('alembic.runtime.migration')
CHUNK_BYTES = 1024 * 1024  # console.services.artifact_blobs.CHUNK_BYTES at this revision

_artifact = sa.table('artifact', sa.column('sha256', sa.String), sa.column('hosted', sa.Boolean))
_blob = sa.table(
    'artifact_blob',
    sa.column('sha256', sa.String),
    sa.column('size_bytes', sa.Integer),
    sa.column('chunk_count', sa.Integer),
    sa.column('created_at', sqlmodel.sql.sqltypes.UTCDateTime()),
)
_chunk = sa.table(
    'artifact_chunk',
    sa.column('sha256', sa.String),
    sa.column('seq', sa.Integer),
    sa.column('data', sa.LargeBinary),
)


def _data_dir(url: str) -> Path | None:
    given = context.config.attributes.get('data_dir') or os.environ.get('PROXIMA_DATA_DIR')
    if given:
        return Path(given)
    if url.startswith('sqlite:///') and len(url) > len('sqlite:///'):
        return Path(url[len('sqlite:///') :]).parent
    return None


def _import(path: Path, sha: str) -> None:
    digest = hashlib.sha256()
    with path.open('rb') as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    if digest.hexdigest() != sha:
        log.warning('build file %s does not match its SHA-256: not imported', path)
        return
    size = seq = 0
    op.execute(
        _blob.insert().values(
            sha256=sha, size_bytes=0, chunk_count=0, created_at=datetime.now(UTC)
        )
    )
    with path.open('rb') as fh:
        while chunk := fh.read(CHUNK_BYTES):
            op.execute(_chunk.insert().values(sha256=sha, seq=seq, data=chunk))
            size += len(chunk)
            seq += 1
    op.execute(
        _blob.update()
        .where(_blob.c.sha256 == sha)
        .values(size_bytes=size, chunk_count=seq)
    )
    log.info('imported build %s (%d bytes) into the database', sha, size)


def upgrade() -> None:
    op.create_table(
        'artifact_blob',
        sa.Column('sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('chunk_count', sa.Integer(), nullable=False),
        sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('sha256'),
    )
    op.create_table(
        'artifact_chunk',
        sa.Column('sha256', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(['sha256'], ['artifact_blob.sha256']),
        sa.PrimaryKeyConstraint('sha256', 'seq'),
    )
    data_dir = _data_dir(str(op.get_bind().engine.url))
    if data_dir is None:
        return
    hosted = op.get_bind().execute(
        sa.select(_artifact.c.sha256).where(_artifact.c.hosted.is_(True)).distinct()
    )
    for (sha,) in hosted:
        path = data_dir / 'artifacts' / sha
        if len(sha) == 64 and path.is_file():
            _import(path, sha)
        else:
            log.warning('hosted build %s has no file under %s: not imported', sha, data_dir)


def downgrade() -> None:
    op.drop_table('artifact_chunk')
    op.drop_table('artifact_blob')
