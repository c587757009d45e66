"""Agent-facing endpoints: enrollment and the credential-rotation proof."""

from fastapi import APIRouter, Response, status

from console.api.deps import RuntimeDep
from console.services import enrollment, identities
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    ErrorBody,
    NatsCredentials,
    NatsCredentialsRequest,
    RotationAccepted,
    RotationProof,
)

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])

_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorBody, "description": "bad or stale signature"},
    401: {"model": ErrorBody, "description": "install token invalid, expired, used up or revoked"},
    409: {"model": ErrorBody, "description": "the (environment, agent_type, name) is held"},
    422: {"model": ErrorBody, "description": "malformed request"},
}


@router.post(
    "/enroll",
    response_model=EnrollResponse,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": EnrollResponse, "description": "re-bound or repeated"}, **_ERRORS},
)
async def enroll_agent(
    req: EnrollRequest, runtime: RuntimeDep, response: Response
) -> EnrollResponse:
    answer, created = await enrollment.enroll_agent(runtime, req)
    if not created:
        response.status_code = status.HTTP_200_OK
    return answer


@router.post("/{agent_id}/credentials", response_model=RotationAccepted, responses=_ERRORS)
async def rotate_proof(
    agent_id: str, proof: RotationProof, runtime: RuntimeDep
) -> RotationAccepted:
    """Called by the agent itself, authenticated by the signature of its current key."""
    return await identities.accept_rotation(runtime, agent_id, proof)


@router.post("/{agent_id}/nats-credentials", response_model=NatsCredentials, responses=_ERRORS)
async def nats_credentials(
    agent_id: str, body: NatsCredentialsRequest, runtime: RuntimeDep
) -> NatsCredentials:
    """A fresh NATS user JWT for the agent's current key, proven by a signature of that key.

    For an agent whose rotation answer was lost after the Console accepted the new key, or after
    the fleet's signing keys were replaced."""
    return await enrollment.nats_credentials(runtime, agent_id, body)
