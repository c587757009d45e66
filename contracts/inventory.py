"""Cluster inventory on NATS: one snapshot per sync, gzip-compressed and chunked under the
server's max payload.

Each message on ``proxima.agent.<id>.inventory`` is one chunk: a JSON header line, ``\\n``, then
raw bytes of the gzip stream of the snapshot's JSON. The Console reassembles the ``total``
chunks of a ``sync_id`` in ``seq`` order, checks the SHA-256, decompresses and stores it.
"""

import gzip
import hashlib
import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from contracts.lenient import unknown_as_none
from contracts.vocabulary.inventory import InventoryProblemKind

CHUNK_OVERHEAD = 512  # room for the header line
DEFAULT_CHUNK_BYTES = 256 * 1024


class ObjectSummary(BaseModel):
    """What the Console keeps of one Kubernetes object."""

    model_config = ConfigDict(extra="allow")

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    status: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class InventoryProblem(BaseModel):
    """A kind the sync could not read, as a fact: ``resource`` is the kind's plural
    (``rollouts``), ``message`` the same prose as the matching line of ``errors``. ``kind`` is
    None when this build does not know the sender's kind (a newer agent's)."""

    model_config = ConfigDict(extra="ignore")

    kind: Annotated[InventoryProblemKind | None, unknown_as_none(InventoryProblemKind)]
    resource: str = Field(max_length=253)
    message: str = Field(max_length=4096)


class InventorySnapshot(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cluster_slug: str
    cluster_name: str
    collected_at: datetime
    sync_interval_seconds: float
    kubernetes_version: str | None = None
    counts: dict[str, int] = Field(description="objects seen per kind (before any limit)")
    objects: dict[str, list[ObjectSummary]] = Field(default_factory=dict)
    truncated: dict[str, dict[str, int]] = Field(
        default_factory=dict, description='e.g. {"pods": {"limit": 5000, "total": 6210}}'
    )
    excluded_namespaces: list[str] = Field(default_factory=list)
    errors: list[str] = Field(
        default_factory=list, description="kinds that could not be read, e.g. forbidden rollouts"
    )
    problems: list[InventoryProblem] | None = Field(
        default=None,
        description="``errors`` as facts, one per kind; None from agents that do not send it yet",
    )


class ChunkHeader(BaseModel):
    sync_id: str
    seq: int
    total: int
    sha256: str = Field(description="of the whole gzip stream")


def encode_chunks(
    snapshot: InventorySnapshot, sync_id: str, max_payload: int = DEFAULT_CHUNK_BYTES
) -> list[bytes]:
    blob = gzip.compress(snapshot.model_dump_json().encode(), compresslevel=6)
    digest = hashlib.sha256(blob).hexdigest()
    size = max(1024, max_payload - CHUNK_OVERHEAD)
    parts = [blob[i : i + size] for i in range(0, len(blob), size)] or [b""]
    return [
        ChunkHeader(sync_id=sync_id, seq=i, total=len(parts), sha256=digest)
        .model_dump_json()
        .encode()
        + b"\n"
        + part
        for i, part in enumerate(parts)
    ]


def split_chunk(message: bytes) -> tuple[ChunkHeader, bytes]:
    head, _, body = message.partition(b"\n")
    return ChunkHeader.model_validate_json(head), body


class InventoryAssemblyError(ValueError):
    pass


def assemble(headers_and_parts: list[tuple[ChunkHeader, bytes]]) -> InventorySnapshot:
    ordered = sorted(headers_and_parts, key=lambda hp: hp[0].seq)
    if not ordered or len(ordered) != ordered[0][0].total:
        raise InventoryAssemblyError("incomplete inventory")
    blob = b"".join(part for _h, part in ordered)
    if hashlib.sha256(blob).hexdigest() != ordered[0][0].sha256:
        raise InventoryAssemblyError("inventory checksum mismatch")
    return InventorySnapshot.model_validate(json.loads(gzip.decompress(blob)))
