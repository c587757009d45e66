"""Agent builds hosted by the Console: checked (the fleet's signature, the version stamped
inside), stored once by their SHA-256 in the database (``artifact_blobs``: every replica serves
them), listed, and served to agents.

One artifact per (environment, version, sha256): uploading the same build again answers the
artifact already there. An upload that fails for any reason (too large, cut off, refused)
leaves nothing behind: the body is checked in a private temp file (0600, under
``<data_dir>/artifacts``), and only a build that passed is copied into the database.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from console.auth import Principal
from console.core.builds import BuildFileError, parse_signing_key, stamped_version, verifies
from console.errors import BadRequestError, ConflictError, NotFoundError
from console.models import Artifact, ArtifactBlob
from console.services.artifact_blobs import store_file, stream_blob
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.enrollment import Version
from contracts.rollouts import HOSTED_ARTIFACTS_PATH, ArtifactRef, artifact_url_allowed
from contracts.vocabulary import ErrorReason, Scope
from rollout_policy import VersionError, parse_version

log = logging.getLogger(__name__)

_VERSION = TypeAdapter(Version)


def _ref(artifact: Artifact) -> ArtifactRef:
    return ArtifactRef(
        version=artifact.version,
        url=artifact.url,
        sha256=artifact.sha256,
        signature=artifact.signature,
    )


def check_version(version: str) -> str:
    """The fleet's one version rule (contracts' length bounds, ``rollout_policy``'s syntax)."""
    try:
        _VERSION.validate_python(version)
        parse_version(version)
    except (ValidationError, VersionError):
        shown = version if len(version) <= 80 else version[:77] + "..."
        raise BadRequestError(
            ErrorReason.INVALID_VERSION,
            f"version {shown!r}: 1-64 characters, like 1.2.3, 1.2.3-rc.1 or 1.2.3+build",
        ) from None
    return version


async def check_source(
    rt: ServiceRuntime, principal: Principal, artifact: ArtifactRef, *, base_url: str | None
) -> None:
    """A rollout's artifact comes from this Console (a build hosted in this environment, or a
    URL under ``<base_url>/api/v1/artifacts/``) or from an allowed prefix, nothing else."""
    own = [f"{base_url.rstrip('/')}{HOSTED_ARTIFACTS_PATH}"] if base_url else []
    if artifact_url_allowed(artifact.url, [*own, *rt.settings.artifact_url_allow]):
        return

    def hosted(uow: UnitOfWork) -> bool:
        row = uow.session.exec(
            select(Artifact.id).where(
                Artifact.environment_id == principal.environment_id,
                Artifact.url == artifact.url,
                Artifact.hosted == True,  # noqa: E712 (SQL)
            )
        ).first()
        return row is not None

    if not await rt.units.run(hosted):
        raise BadRequestError(
            ErrorReason.ARTIFACT_URL_NOT_ALLOWED,
            "the artifact URL must be this Console's /api/v1/artifacts/… (upload the build) "
            "or under a prefix of PROXIMA_ARTIFACT_URL_ALLOW",
        )


async def _receive(store: Path, body: AsyncIterable[bytes]) -> tuple[Path, str, int]:
    """Stream ``body`` into a private temp file in ``store``: (path, sha256, size). The file is
    removed if anything stops the stream (the body limit, a client that went away)."""
    fd, name = tempfile.mkstemp(prefix=".upload-", dir=store)
    tmp = Path(name)
    digest = hashlib.sha256()
    size = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            async for chunk in body:
                digest.update(chunk)
                size += len(chunk)
                fh.write(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)  # noqa: ASYNC240 (local disk)
        raise
    return tmp, digest.hexdigest(), size


def _check_build(tmp: Path, *, version: str, sha: str, signature: str, keys: list[bytes]) -> None:
    if not verifies(keys, bytes.fromhex(sha), signature):
        raise BadRequestError(
            ErrorReason.BAD_SIGNATURE,
            "the signature does not verify with any signing key the Console trusts "
            "(PROXIMA_SIGNING_PUBLIC_KEYS)",
        )
    try:
        stamped = stamped_version(tmp)
    except BuildFileError as e:
        raise BadRequestError(ErrorReason.NOT_AN_AGENT_BUILD, f"not an agent build: {e}") from None
    if stamped != version:
        shown = stamped if len(stamped) <= 80 else stamped[:77] + "..."
        raise BadRequestError(
            ErrorReason.BUILD_VERSION_MISMATCH,
            f"the build says it is version {shown!r}, not {version!r}",
        )


async def upload(
    rt: ServiceRuntime,
    principal: Principal,
    *,
    version: str,
    signature: str,
    body: AsyncIterable[bytes],
    base_url: str,
) -> tuple[ArtifactRef, bool]:
    """Check and store the body, record it under ``base_url``: (its reference, whether it is
    new). Refused: a bad version, no trusted key, a bad signature, a version mismatch."""
    principal.require(Scope.ROLLOUTS_WRITE)
    check_version(version)
    keys = [parse_signing_key(k) for k in rt.settings.signing_public_keys]
    if not keys:
        raise ConflictError(
            ErrorReason.SIGNING_KEYS_NOT_CONFIGURED,
            "the Console trusts no build-signing key: set PROXIMA_SIGNING_PUBLIC_KEYS",
        )
    store = rt.settings.data_dir / "artifacts"
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp, sha, size = await _receive(store, body)
    try:
        if size == 0:
            raise BadRequestError(ErrorReason.EMPTY_ARTIFACT, "the upload body is empty")
        await asyncio.to_thread(
            _check_build, tmp, version=version, sha=sha, signature=signature, keys=keys
        )
        try:
            return await rt.units.run(
                lambda uow: _record(uow, principal, tmp, version, sha, signature, size, base_url),
                write=True,
            )
        except IntegrityError:  # the same build, uploaded twice at once: the other one won
            return await rt.units.run(
                lambda uow: _record(uow, principal, tmp, version, sha, signature, size, base_url),
                write=True,
            )
    finally:
        tmp.unlink(missing_ok=True)


def _record(
    uow: UnitOfWork,
    principal: Principal,
    tmp: Path,
    version: str,
    sha: str,
    signature: str,
    size: int,
    base_url: str,
) -> tuple[ArtifactRef, bool]:
    """The build's bytes (unless stored already) and its artifact row, in one transaction."""
    store_file(uow.session, sha, tmp)
    existing = uow.session.exec(
        select(Artifact).where(
            Artifact.environment_id == principal.environment_id,
            Artifact.version == version,
            Artifact.sha256 == sha,
        )
    ).first()
    if existing is not None:
        return _ref(existing), False
    artifact = Artifact(
        client_id=principal.client_id,
        environment_id=principal.environment_id,
        version=version,
        url="",
        sha256=sha,
        signature=signature,
        size_bytes=size,
        hosted=True,
    )
    artifact.url = f"{base_url}{HOSTED_ARTIFACTS_PATH}{artifact.id}/download"
    uow.session.add(artifact)
    return _ref(artifact), True


async def list_artifacts(rt: ServiceRuntime, principal: Principal) -> list[ArtifactRef]:
    """The environment's builds, newest first. A row no longer valid (stored before versions
    were bounded) is left out and logged, never a 500; migration 0008 removes such rows."""
    principal.require(Scope.ROLLOUTS_READ)

    def work(uow: UnitOfWork) -> list[ArtifactRef]:
        rows = uow.session.exec(
            select(Artifact)
            .where(Artifact.environment_id == principal.environment_id)
            .order_by(col(Artifact.created_at).desc())
        ).all()
        refs = []
        for row in rows:
            try:
                refs.append(_ref(row))
            except ValidationError:
                log.warning("artifact %s is invalid (version %.80r): left out", row.id, row.version)
        return refs

    return await rt.units.run(work)


@dataclass(frozen=True, slots=True)
class HostedBuild:
    """A hosted build as a download serves it: its chunks stream from the database."""

    version: str
    sha256: str
    size_bytes: int
    chunks: AsyncIterator[bytes]


async def hosted_build(rt: ServiceRuntime, artifact_id: str) -> HostedBuild:
    """The stored bytes of a hosted build and its version (no token: agents verify builds)."""

    def work(uow: UnitOfWork) -> tuple[Artifact | None, ArtifactBlob | None]:
        artifact = uow.session.get(Artifact, artifact_id)
        if artifact is None or not artifact.hosted:
            return None, None
        return artifact, uow.session.get(ArtifactBlob, artifact.sha256)

    artifact, blob = await rt.units.run(work) if len(artifact_id) <= 32 else (None, None)
    if artifact is None:
        raise NotFoundError(ErrorReason.ARTIFACT_NOT_FOUND, f"artifact {artifact_id:.40} not found")
    if blob is None:
        raise NotFoundError(ErrorReason.ARTIFACT_MISSING, f"artifact {artifact_id}'s build is gone")
    return HostedBuild(
        version=artifact.version,
        sha256=blob.sha256,
        size_bytes=blob.size_bytes,
        chunks=stream_blob(rt.units, blob.sha256, blob.chunk_count),
    )
