"""Agent builds hosted by the Console: stored once by their SHA-256 (signed offline), listed,
and served to agents."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterable
from pathlib import Path

from sqlmodel import col, select

from console.auth import Principal
from console.errors import BadRequestError, NotFoundError
from console.models import Artifact
from console.schemas import Scope
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.rollouts import ArtifactRef
from contracts.vocabulary import ErrorReason


def _ref(artifact: Artifact) -> ArtifactRef:
    return ArtifactRef(
        version=artifact.version,
        url=artifact.url,
        sha256=artifact.sha256,
        signature=artifact.signature,
    )


async def upload(
    rt: ServiceRuntime,
    principal: Principal,
    *,
    version: str,
    signature: str,
    body: AsyncIterable[bytes],
    base_url: str,
    upload_name: str,
) -> ArtifactRef:
    """Store the body under its SHA-256 and record it; its download URL is under ``base_url``."""
    principal.require(Scope.ROLLOUTS_WRITE)
    store = rt.settings.data_dir / "artifacts"
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / f".upload-{os.getpid()}-{upload_name}"
    digest = hashlib.sha256()
    size = 0
    with open(tmp, "wb") as fh:  # noqa: ASYNC230 (local disk, small chunks)
        async for chunk in body:
            digest.update(chunk)
            size += len(chunk)
            fh.write(chunk)
    if size == 0:
        tmp.unlink()
        raise BadRequestError(ErrorReason.EMPTY_ARTIFACT, "the upload body is empty")
    sha = digest.hexdigest()
    os.replace(tmp, store / sha)

    def work(uow: UnitOfWork) -> ArtifactRef:
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
        artifact.url = f"{base_url}/api/v1/artifacts/{artifact.id}/download"
        uow.session.add(artifact)
        return _ref(artifact)

    return await rt.units.run(work, write=True)


async def list_artifacts(rt: ServiceRuntime, principal: Principal) -> list[ArtifactRef]:
    principal.require(Scope.ROLLOUTS_READ)

    def work(uow: UnitOfWork) -> list[ArtifactRef]:
        rows = uow.session.exec(
            select(Artifact)
            .where(Artifact.environment_id == principal.environment_id)
            .order_by(col(Artifact.created_at).desc())
        ).all()
        return [_ref(a) for a in rows]

    return await rt.units.run(work)


async def hosted_file(rt: ServiceRuntime, artifact_id: str) -> tuple[Path, str]:
    """The stored file of a hosted build and its version (no token: agents verify builds)."""
    artifact = await rt.units.run(lambda uow: uow.session.get(Artifact, artifact_id))
    if artifact is None or not artifact.hosted:
        raise NotFoundError(ErrorReason.ARTIFACT_NOT_FOUND, f"artifact {artifact_id} not found")
    path = rt.settings.data_dir / "artifacts" / artifact.sha256
    if not path.exists():
        raise NotFoundError(ErrorReason.ARTIFACT_MISSING, f"artifact {artifact_id}'s file is gone")
    return path, artifact.version
