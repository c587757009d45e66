"""Cluster inventory on NATS: one snapshot per sync, gzip-compressed and chunked under the
server's max payload.

Each message on ``proxima.agent.<id>.inventory`` is one chunk: a JSON header line, ``\\n``, then
raw bytes of the gzip stream of the snapshot's JSON. The Console reassembles the ``total``
chunks of a ``sync_id`` in ``seq`` order, checks the SHA-256, decompresses and stores it.

Bounds (the protocol's; a reader may be stricter): a sync has at most :data:`MAX_CHUNKS`
chunks, a header line at most :data:`CHUNK_OVERHEAD` bytes, and :func:`assemble` inflates at
most ``max_bytes`` of JSON (default :data:`MAX_SNAPSHOT_BYTES`) — the gzip stream is read in
steps with an output cap, so a small message that inflates to a gigabyte stops at the cap.
Every failure is an :class:`InventoryAssemblyError`.
"""

import gzip
import hashlib
import zlib
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.bounds import (
    FINITE,
    ClusterSlugText,
    Count,
    Detail,
    Identifier,
    Seconds,
    text,
)
from contracts.lenient import unknown_as_none
from contracts.vocabulary.inventory import InventoryProblemKind

CHUNK_OVERHEAD = 512  # room for the header line
DEFAULT_CHUNK_BYTES = 256 * 1024
MAX_CHUNKS = 4096
"""Most chunks one sync may announce."""
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024
"""Most bytes of JSON a snapshot may inflate to (a reader's own cap may be lower)."""
MAX_KINDS = 64
MAX_OBJECTS_PER_KIND = 500_000

_Kind = Annotated[str, text(63, min_length=1)]
_ObjectLabels = Annotated[
    dict[Annotated[str, text(317)], Annotated[str, text(253)]], Field(max_length=256)
]


class ObjectSummary(BaseModel):
    """What the Console keeps of one Kubernetes object."""

    model_config = ConfigDict(extra="allow", **FINITE)

    name: Annotated[str, text(253)]
    namespace: Annotated[str, text(253)] | None = None
    labels: _ObjectLabels = Field(default_factory=dict)
    status: Annotated[str, text(256)] | None = None
    detail: Detail = Field(default_factory=dict)


class InventoryProblem(BaseModel):
    """A kind the sync could not read, as a fact: ``resource`` is the kind's plural
    (``rollouts``), ``message`` the same prose as the matching line of ``errors``. ``kind`` is
    None when this build does not know the sender's kind (a newer agent's)."""

    model_config = ConfigDict(extra="ignore")

    kind: Annotated[InventoryProblemKind | None, unknown_as_none(InventoryProblemKind)]
    resource: Annotated[str, text(253)]
    message: Annotated[str, text()]


class InventorySnapshot(BaseModel):
    model_config = ConfigDict(extra="ignore", **FINITE)

    cluster_slug: ClusterSlugText
    cluster_name: Annotated[str, text(253)]
    collected_at: datetime
    sync_interval_seconds: Seconds
    kubernetes_version: Annotated[str, text(64)] | None = None
    counts: Annotated[dict[_Kind, Count], Field(max_length=MAX_KINDS)] = Field(
        description="objects seen per kind (before any limit)"
    )
    objects: Annotated[
        dict[_Kind, Annotated[list[ObjectSummary], Field(max_length=MAX_OBJECTS_PER_KIND)]],
        Field(max_length=MAX_KINDS),
    ] = Field(default_factory=dict)
    truncated: Annotated[
        dict[_Kind, Annotated[dict[_Kind, Count], Field(max_length=8)]],
        Field(max_length=MAX_KINDS),
    ] = Field(default_factory=dict, description='e.g. {"pods": {"limit": 5000, "total": 6210}}')
    excluded_namespaces: Annotated[list[Annotated[str, text(253)]], Field(max_length=1024)] = Field(
        default_factory=list
    )
    errors: Annotated[list[Annotated[str, text()]], Field(max_length=MAX_KINDS)] = Field(
        default_factory=list, description="kinds that could not be read, e.g. forbidden rollouts"
    )
    problems: Annotated[list[InventoryProblem], Field(max_length=MAX_KINDS)] | None = Field(
        default=None,
        description="``errors`` as facts, one per kind; None from agents that do not send it yet",
    )


class ChunkHeader(BaseModel):
    """One chunk's header line: ``seq`` of ``total`` (at most :data:`MAX_CHUNKS`)."""

    model_config = ConfigDict(extra="ignore")

    sync_id: Identifier
    seq: Annotated[int, Field(ge=0, lt=MAX_CHUNKS)]
    total: Annotated[int, Field(ge=1, le=MAX_CHUNKS)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="of the whole gzip stream"
    )

    @model_validator(mode="after")
    def _seq_within_total(self) -> "ChunkHeader":
        if self.seq >= self.total:
            raise ValueError(f"seq {self.seq} is not below total {self.total}")
        return self


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
    """The header and the part of one message; :class:`InventoryAssemblyError` if malformed."""
    head, sep, body = message.partition(b"\n")
    if not sep or len(head) > CHUNK_OVERHEAD:
        raise InventoryAssemblyError("a chunk needs a header line of at most 512 bytes")
    try:
        return ChunkHeader.model_validate_json(head), body
    except ValidationError as exc:
        raise InventoryAssemblyError(f"bad chunk header: {exc.error_count()} error(s)") from None


class InventoryAssemblyError(ValueError):
    """Chunks that do not make a snapshot: incomplete, corrupt, over a bound or invalid."""


def inflate(blob: bytes, max_bytes: int = MAX_SNAPSHOT_BYTES) -> bytes:
    """The gzip stream ``blob`` inflated, stopping with :class:`InventoryAssemblyError` as soon
    as the output would pass ``max_bytes`` (memory never holds more than the cap)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(blob, max_bytes + 1)
    except zlib.error as exc:
        raise InventoryAssemblyError(f"inventory is not a gzip stream: {exc}") from None
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise InventoryAssemblyError(f"inventory inflates past {max_bytes} bytes")
    if not inflater.eof:
        raise InventoryAssemblyError("inventory gzip stream is truncated")
    return out


def assemble(
    headers_and_parts: list[tuple[ChunkHeader, bytes]], *, max_bytes: int = MAX_SNAPSHOT_BYTES
) -> InventorySnapshot:
    """The snapshot of one sync's chunks. CPU- and memory-heavy: run it off the event loop.
    Raises only :class:`InventoryAssemblyError`."""
    ordered = sorted(headers_and_parts, key=lambda hp: hp[0].seq)
    first = ordered[0][0] if ordered else None
    if first is None or len(ordered) != first.total:
        raise InventoryAssemblyError("incomplete inventory")
    if [h.seq for h, _ in ordered] != list(range(first.total)) or any(
        (h.sync_id, h.total, h.sha256) != (first.sync_id, first.total, first.sha256)
        for h, _ in ordered
    ):
        raise InventoryAssemblyError("chunks of one sync disagree on their headers")
    blob = b"".join(part for _h, part in ordered)
    if hashlib.sha256(blob).hexdigest() != first.sha256:
        raise InventoryAssemblyError("inventory checksum mismatch")
    raw = inflate(blob, max_bytes)
    del blob
    try:
        return InventorySnapshot.model_validate_json(raw)
    except ValidationError as exc:
        raise InventoryAssemblyError(
            f"inventory snapshot is invalid: {exc.error_count()} error(s), first "
            f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}: {exc.errors()[0]['msg']}"
        ) from None
