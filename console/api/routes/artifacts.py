"""Agent builds hosted by the Console: upload once (signed offline), download by agents.

Downloads need no token: a build is only ever installed after its SHA-256 and its ed25519
signature check out against the signing key the agent was installed with.
"""

from __future__ import annotations

import hashlib
import os
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlmodel import Session, col, select

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.errors import BadRequestError, NotFoundError
from console.models import Artifact
from console.schemas import Scope
from contracts.rollouts import ArtifactRef

router = APIRouter(prefix="/api/v1/artifacts", tags=["artifacts"])
_ERRORS = errors(400, 401, 403, 404, 413)


def _ref(artifact: Artifact) -> ArtifactRef:
    return ArtifactRef(
        version=artifact.version,
        url=artifact.url,
        sha256=artifact.sha256,
        signature=artifact.signature,
    )


@router.put(
    "/{version}", status_code=status.HTTP_201_CREATED, response_model=ArtifactRef, responses=_ERRORS
)
async def upload(
    version: str,
    request: Request,
    principal: PrincipalDep,
    runtime: RuntimeDep,
    signature: Annotated[
        str,
        Query(
            min_length=16, max_length=256, description="base64url ed25519 over the SHA-256 digest"
        ),
    ],
) -> ArtifactRef:
    """Host a build: the body is the program file (application/octet-stream)."""
    principal.require(Scope.ROLLOUTS_WRITE)
    store = runtime.settings.data_dir / "artifacts"
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / f".upload-{os.getpid()}-{id(request)}"
    digest = hashlib.sha256()
    size = 0
    with open(tmp, "wb") as fh:  # noqa: ASYNC230 (local disk, small chunks)
        async for chunk in request.stream():
            digest.update(chunk)
            size += len(chunk)
            fh.write(chunk)
    if size == 0:
        tmp.unlink()
        raise BadRequestError("empty_artifact", "the upload body is empty")
    sha = digest.hexdigest()
    os.replace(tmp, store / sha)
    base = (runtime.settings.public_url or str(request.base_url)).rstrip("/")

    def work() -> ArtifactRef:
        with Session(runtime.engine, expire_on_commit=False) as session:
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
            artifact.url = f"{base}/api/v1/artifacts/{artifact.id}/download"
            session.add(artifact)
            session.commit()
            return _ref(artifact)

    return await run_in_threadpool(work)


@router.get("", response_model=list[ArtifactRef], responses=_ERRORS)
def list_artifacts(principal: PrincipalDep, runtime: RuntimeDep) -> list[ArtifactRef]:
    principal.require(Scope.ROLLOUTS_READ)
    with Session(runtime.engine) as session:
        rows = session.exec(
            select(Artifact)
            .where(Artifact.environment_id == principal.environment_id)
            .order_by(col(Artifact.created_at).desc())
        ).all()
        return [_ref(a) for a in rows]


@router.get("/{artifact_id}/download", response_class=FileResponse, responses=_ERRORS)
def download(artifact_id: str, runtime: RuntimeDep) -> FileResponse:
    with Session(runtime.engine) as session:
        artifact = session.get(Artifact, artifact_id)
    if artifact is None or not artifact.hosted:
        raise NotFoundError("artifact_not_found", f"artifact {artifact_id} not found")
    path = runtime.settings.data_dir / "artifacts" / artifact.sha256
    if not path.exists():
        raise NotFoundError("artifact_missing", f"artifact {artifact_id}'s file is gone")
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=f"proxima-agent-{artifact.version}.pyz",
    )
