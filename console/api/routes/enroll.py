"""Agent-facing endpoints: enrollment and the credential-rotation proof."""

from fastapi import APIRouter, Depends, Request, Response, status

from console.api.deps import RuntimeDep
from console.core.audit_log import Field, audit_refusal, client_address
from console.core.secrets import loggable_prefix
from console.errors import ConsoleError
from console.services import identities
from console.services.identities.enrollment_facts import token_usable
from console.services.unit_of_work import UnitOfWork
from contracts.enrollment import (
    EnrollmentPreview,
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
    401: {
        "model": ErrorBody,
        "description": "bad or stale signature; install token invalid, expired, used up or revoked",
    },
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
        200: {
            "model": EnrollResponse | EnrollmentPreview,
            "description": "re-bound or repeated; with ?dry_run=true, what it would do",
        },
        **_LIMITED_ERRORS,
    },
)
async def enroll_agent(
    req: EnrollRequest, runtime: RuntimeDep, request: Request, dry_run: bool = False
) -> Response:
    """Enroll or re-bind under (environment, agent_type, name). ``dry_run=true`` answers what the
    same request would do (an ``EnrollmentPreview``: create, the same identity, or a re-bind,
    and whether it would replace a released record's evidence) or the same refusal, and changes
    nothing."""
    source = client_address(request)
    prefix = loggable_prefix(req.install_token)
    seen: dict[str, Field] = {
        "source": source,
        "install_token_prefix": prefix,
        "agent_type": req.agent_type.value,
    }
    limits = runtime.rate_limits

    def guard(uow: UnitOfWork) -> None:
        valid = token_usable(uow.session, req.install_token)
        limits.count(uow, limits.enroll, source=source, token=req.install_token, valid=valid)

    try:
        if dry_run:
            preview = await identities.preview_enrollment(runtime, req, guard=guard)
            return Response(preview.model_dump_json(), media_type="application/json")
        answer, created = await identities.enroll_agent(runtime, req, guard=guard, seen=seen)
    except ConsoleError as exc:
        # a bad or stale signature is an authentication failure too: 401 like a bad token
        event = "auth_failed" if exc.status == 401 else "enroll_refused"
        audit_refusal(event, surface="enroll", reason=exc.reason, dry_run=dry_run, **seen)
        raise
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
    return await identities.nats_credentials(runtime, agent_id, body)
