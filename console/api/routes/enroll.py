"""Agent-facing endpoints: enrollment and the credential-rotation proof."""

from datetime import UTC

from fastapi import APIRouter, Response, status
from fastapi.concurrency import run_in_threadpool
from prometheus_client import Histogram
from sqlmodel import Session

from console.api.deps import RuntimeDep
from console.core.clock import utcnow
from console.core.signatures import SignatureError, verify
from console.enrollment import EnrollmentConflictError, EnrollOutcome, enroll
from console.errors import BadRequestError, UnauthorizedError
from console.identities import complete_rotation
from console.models import Agent
from contracts.agent_types import AgentType
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    ErrorBody,
    NatsCredentials,
    NatsCredentialsRequest,
    RotationAccepted,
    RotationProof,
    nats_credentials_message,
)

ENROLL_DB_SECONDS = Histogram(
    "proxima_enroll_db_seconds",
    "Enrollment: the database transaction",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
ENROLL_APPLY_SECONDS = Histogram(
    "proxima_enroll_nats_apply_seconds",
    "Enrollment: waiting for NATS to enforce the new key",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
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
    settings = runtime.settings

    def work() -> EnrollOutcome:
        with runtime.writer(), Session(runtime.engine, expire_on_commit=False) as session:
            try:
                outcome = enroll(
                    session,
                    req=req,
                    quiet_seconds=settings.identity_quiet_seconds,
                    skew_seconds=settings.enroll_clock_skew_seconds,
                )
            except EnrollmentConflictError:
                session.commit()  # keep the conflict flag on the record holding the name
                raise
            session.commit()
            return outcome

    with ENROLL_DB_SECONDS.time():
        outcome = await run_in_threadpool(work)
    if outcome.revoked_key:  # a re-bind retired the record's previous key
        with ENROLL_APPLY_SECONDS.time():
            await runtime.apply_identities()
    if not outcome.created:
        response.status_code = status.HTTP_200_OK
    agent = outcome.agent
    return EnrollResponse(
        agent_id=agent.id,
        agent_type=AgentType(agent.agent_type),
        name=agent.name,
        client_id=agent.client_id,
        environment_id=agent.environment_id,
        nats_url=runtime.agent_nats_url,
        nats_jwt=runtime.agent_jwt(agent.id, agent.nats_public_key or ""),
        rebound=outcome.rebound,
    )


@router.post("/{agent_id}/credentials", response_model=RotationAccepted, responses=_ERRORS)
async def rotate_proof(
    agent_id: str, proof: RotationProof, runtime: RuntimeDep
) -> RotationAccepted:
    """Called by the agent itself, authenticated by the signature of its current key."""

    def work() -> str:
        with Session(runtime.engine, expire_on_commit=False) as session:
            agent = complete_rotation(session, agent_id=agent_id, proof=proof)
            session.commit()
            return agent.nats_public_key or ""

    public_key = await run_in_threadpool(work)
    await runtime.apply_identities()
    waiter = runtime.rotation_waiters.get(proof.nonce)
    if waiter is not None:
        waiter.set()
    return RotationAccepted(
        agent_id=agent_id,
        public_key=public_key,
        nats_jwt=runtime.agent_jwt(agent_id, public_key),
    )


@router.post("/{agent_id}/nats-credentials", response_model=NatsCredentials, responses=_ERRORS)
def nats_credentials(
    agent_id: str, body: NatsCredentialsRequest, runtime: RuntimeDep
) -> NatsCredentials:
    """A fresh NATS user JWT for the agent's current key, proven by a signature of that key.

    For an agent whose rotation answer was lost after the Console accepted the new key, or after
    the fleet's signing keys were replaced."""
    now = utcnow()
    signed_at = body.signed_at if body.signed_at.tzinfo else body.signed_at.replace(tzinfo=UTC)
    if abs((now - signed_at).total_seconds()) > runtime.settings.enroll_clock_skew_seconds:
        raise BadRequestError("stale_signature", "the request was signed too long ago")
    message = nats_credentials_message(
        agent_id=agent_id, public_key=body.public_key, signed_at=body.signed_at
    )
    try:
        verify(body.public_key, message, body.signature)
    except SignatureError as exc:
        raise UnauthorizedError("bad_signature", f"signature does not verify: {exc.why}") from exc
    with Session(runtime.engine) as session:
        agent = session.get(Agent, agent_id)
    if agent is None or agent.nats_public_key != body.public_key or agent.revoked_at is not None:
        raise UnauthorizedError(
            "not_current_key",
            "this key is not the current key of a live identity (released, rotated away or "
            "revoked)",
        )
    return NatsCredentials(
        agent_id=agent_id,
        public_key=body.public_key,
        nats_url=runtime.agent_nats_url,
        nats_jwt=runtime.agent_jwt(agent_id, body.public_key),
    )
