"""Agent builds hosted by the Console: upload once (signed offline), download by agents.

An upload is checked before it is kept: signed by a key of PROXIMA_SIGNING_PUBLIC_KEYS, the
version stamped inside equal to the one on the path. The same build uploaded again answers 200
with the artifact already there. Downloads need no token: a build is only ever installed after
its SHA-256 and its ed25519 signature check out against the signing key the agent was installed
with.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.services import artifacts
from contracts.rollouts import ArtifactRef

router = APIRouter(prefix="/api/v1/artifacts", tags=["artifacts"])
_ERRORS = errors(400, 401, 403, 404, 409, 413)


@router.put(
    "/{version}",
    status_code=status.HTTP_201_CREATED,
    response_model=ArtifactRef,
    responses={200: {"model": ArtifactRef, "description": "uploaded before"}, **_ERRORS},
)
async def upload(
    version: Annotated[str, Path(description="the version stamped in the build")],
    request: Request,
    response: Response,
    principal: PrincipalDep,
    runtime: RuntimeDep,
    signature: Annotated[
        str,
        Query(
            min_length=16, max_length=256, description="base64url ed25519 over the SHA-256 digest"
        ),
    ],
) -> ArtifactRef:
    """Host a build: the body is the program file (application/octet-stream). 201 when new,
    200 with the existing artifact when this build was uploaded before."""
    ref, created = await artifacts.upload(
        runtime,
        principal,
        version=version,
        signature=signature,
        body=request.stream(),
        base_url=runtime.backend_url(str(request.base_url)),
    )
    if not created:
        response.status_code = status.HTTP_200_OK
    return ref


@router.get("", response_model=list[ArtifactRef], responses=_ERRORS)
async def list_artifacts(principal: PrincipalDep, runtime: RuntimeDep) -> list[ArtifactRef]:
    return await artifacts.list_artifacts(runtime, principal)


@router.get(
    "/{artifact_id}/download",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, **_ERRORS},
)
async def download(artifact_id: str, runtime: RuntimeDep) -> StreamingResponse:
    """The build's bytes, streamed from the database (any replica serves any build)."""
    build = await artifacts.hosted_build(runtime, artifact_id)
    return StreamingResponse(
        build.chunks,
        media_type="application/octet-stream",
        headers={
            "content-length": str(build.size_bytes),
            "content-disposition": f'attachment; filename="proxima-agent-{build.version}.pyz"',
            "x-content-sha256": build.sha256,
        },
    )
