"""Agent-facing endpoints: enrollment and the credential-rotation proof."""

from fastapi import APIRouter, Depends, Request, Response, status

from console.api.deps import RuntimeDep
from console.core.audit_log import Field, audit, audit_refusal, client_address
from console.core.secrets import loggable_prefix
from console.errors import ConsoleError
from console.services import enrollment, identities
from console.services.enrollment_facts import token_usable
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    ErrorBody,
    NatsCredentials,
    NatsCredentialsRequest,
    RotationAccepted,
    RotationProof,
)
from contracts.vocabulary import ErrorReason

# A bad or stale proof is an authentication failure too (logged as ``auth_failed``).
_BAD_PROOF = {ErrorReason.BAD_SIGNATURE, ErrorReason.STALE_SIGNATURE}

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])

_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorBody, "description": "bad or stale signature"},
    401: {"model": ErrorBody, "description": "install token invalid, expired, used up or revoked"},
    409: {"model": ErrorBody, "description": "the (environment, agent_type, name) is held"},
    422: {"model": ErrorBody, "description": "malformed request"},
}
_LIMITED_ERRORS: dict[int | str, dict[str, object]] = {
    **_ERRORS,
    429: {"model": ErrorBody, "description": "rate limited (see Retry-After)"},
}


@router.post(
    "/enroll",
    response_model=EnrollResponse,
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": EnrollResponse, "description": "re-bound or repeated"},
        **_LIMITED_ERRORS,
    },
)
async def enroll_agent(req: EnrollRequest, runtime: RuntimeDep, request: Request) -> Response:
    source = client_address(request)
    prefix = loggable_prefix(req.install_token)
    seen: dict[str, Field] = {
        "source": source,
        "install_token_prefix": prefix,
        "agent_type": req.agent_type.value,
    }
    try:
        limits = runtime.rate_limits
        answer, created = await enrollment.enroll_agent(
            runtime,
            req,
            guard=lambda uow: limits.count(
                uow,
                limits.enroll,
                source=source,
                token=req.install_token,
                valid=token_usable(uow.session, req.install_token),
            ),
        )
    except ConsoleError as exc:
        failed = exc.status == 401 or exc.reason in _BAD_PROOF
        event = "auth_failed" if failed else "enroll_refused"
        audit_refusal(event, surface="enroll", reason=exc.reason, **seen)
        raise
    audit(
        "agent_rebound" if answer.rebound else "agent_enrolled" if created else "agent_reenrolled",
        agent_id=answer.agent_id,
        environment_id=answer.environment_id,
        **seen,
    )
    # Built here, once: the answer is an ``EnrollResponse`` already, and FastAPI would validate
    # it again against ``response_model`` (which stays, for the OpenAPI document) and encode it
    # field by field.
    return Response(
        answer.model_dump_json(),
        status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        media_type="application/json",
    )


async def _limit_agent(runtime: RuntimeDep, agent_id: str, request: Request) -> None:
    """Per agent id: a flood of signed calls for one identity (a replayed or buggy agent). A
    dependency, so it counts before the body is even read: malformed calls count too."""
    try:
        rules = runtime.rate_limits
        await rules.check(rules.agent_credentials, source=None, token=agent_id)
    except ConsoleError as exc:
        audit_refusal(
            "agent_call_refused",
            surface="agent",
            reason=exc.reason,
            agent_id=agent_id[:64],
            source=client_address(request),
        )
        raise


_LIMITED = [Depends(_limit_agent)]


@router.post(
    "/{agent_id}/credentials",
    response_model=RotationAccepted,
    responses=_LIMITED_ERRORS,
    dependencies=_LIMITED,
)
async def rotate_proof(
    agent_id: str, proof: RotationProof, runtime: RuntimeDep
) -> RotationAccepted:
    """Called by the agent itself, authenticated by the signature of its current key."""
    return await identities.accept_rotation(runtime, agent_id, proof)


@router.post(
    "/{agent_id}/nats-credentials",
    response_model=NatsCredentials,
    responses=_LIMITED_ERRORS,
    dependencies=_LIMITED,
)
async def nats_credentials(
    agent_id: str, body: NatsCredentialsRequest, runtime: RuntimeDep
) -> NatsCredentials:
    """A fresh NATS user JWT for the agent's current key, proven by a signature of that key.

    For an agent whose rotation answer was lost after the Console accepted the new key, or after
    the fleet's signing keys were replaced."""
    return await enrollment.nats_credentials(runtime, agent_id, body)
