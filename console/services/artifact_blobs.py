"""The bytes of hosted builds, in the database: every Console replica serves every build.

A build is stored once per SHA-256 as ``ArtifactChunk`` rows of at most ``CHUNK_BYTES``, written
in the same transaction as their ``ArtifactBlob`` row (a reader sees all of a build or none of
it), and streamed on download one chunk per query, so neither side ever holds a whole build in
memory. The same bytes work on SQLite and PostgreSQL (``LargeBinary``: BLOB / bytea). Why the
database and not an object store: ``docs/scaling.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO, Final

from sqlmodel import Session, select

from console.models import ArtifactBlob, ArtifactChunk
from console.services.unit_of_work import UnitOfWork, UnitsOfWork

__all__ = ["CHUNK_BYTES", "BlobIntegrityError", "has_blob", "store_blob", "stream_blob"]

CHUNK_BYTES: Final = 1024 * 1024
"""1 MiB: small enough for any driver and row, large enough that a 50 MiB build is 50 rows."""


class BlobIntegrityError(RuntimeError):
    """Stored chunks that do not add up to the build they claim to be (size or SHA-256)."""

    def __init__(self, sha256: str, detail: str) -> None:
        super().__init__(f"stored build {sha256}: {detail}")
        self.sha256 = sha256


def has_blob(session: Session, sha256: str) -> bool:
    return session.get(ArtifactBlob, sha256) is not None


def store_blob(session: Session, sha256: str, source: BinaryIO) -> bool:
    """Write the build read from ``source`` (already checked, its digest ``sha256``) unless it
    is stored already; True when written. The digest is checked again as the chunks are read."""
    if has_blob(session, sha256):
        return False
    digest = hashlib.sha256()
    size = seq = 0
    blob = ArtifactBlob(sha256=sha256, size_bytes=0, chunk_count=0)
    session.add(blob)
    session.flush()
    while chunk := source.read(CHUNK_BYTES):
        digest.update(chunk)
        session.add(ArtifactChunk(sha256=sha256, seq=seq, data=chunk))
        session.flush()  # one chunk in memory at a time
        size += len(chunk)
        seq += 1
    if digest.hexdigest() != sha256:
        raise BlobIntegrityError(sha256, "the bytes changed while they were stored")
    blob.size_bytes, blob.chunk_count = size, seq
    session.add(blob)
    return True


def store_file(session: Session, sha256: str, path: Path) -> bool:
    with path.open("rb") as fh:
        return store_blob(session, sha256, fh)


async def stream_blob(units: UnitsOfWork, sha256: str, chunk_count: int) -> AsyncIterator[bytes]:
    """The build's bytes, one chunk (one short read transaction) at a time."""
    for seq in range(chunk_count):

        def read(uow: UnitOfWork, seq: int = seq) -> bytes | None:
            data: bytes | None = uow.session.exec(
                select(ArtifactChunk.data).where(
                    ArtifactChunk.sha256 == sha256, ArtifactChunk.seq == seq
                )
            ).first()
            return data

        data = await units.run(read)
        if data is None:
            raise BlobIntegrityError(sha256, f"chunk {seq} of {chunk_count} is missing")
        yield bytes(data)
