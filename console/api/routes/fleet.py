"""The fleet: list and inspect agents; release, rotate and revoke identities."""

import asyncio
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session, col, select

from console.api.deps import PrincipalDep, RuntimeDep, SessionDep
from console.api.responses import errors
from console.auth import Principal
from console.core.clock import utcnow
from console.errors import GatewayTimeoutError, NotFoundError
from console.identities import release_identity, revoke, start_rotation
from console.models import Agent, AgentEvidence, CredentialRotation
from console.runtime import ConsoleRuntime
from console.schemas import AgentDetail, AgentPublic, Page, RotationResult, Scope
from console.views import agent_detail, agent_public, refused_by_agent
from contracts.agent_types import AgentType
from contracts.messages import CommandKind
from contracts.vocabulary import AgentFlag, AgentStatus

T = TypeVar("T")

router = APIRouter(prefix="/api/v1/fleet/agents", tags=["fleet"])

_ERRORS = errors(401, 403, 404, 409)


def _load(session: Session, agent_id: str, principal: Principal, scope: str) -> Agent:
    agent = session.get(Agent, agent_id)
    if agent is None:
        raise NotFoundError("agent_not_found", f"agent {agent_id} not found")
    principal.require_on(scope, client_id=agent.client_id, environment_id=agent.environment_id)
    return agent


@router.get("", response_model=Page[AgentPublic], responses=_ERRORS)
def list_agents(
    session: SessionDep,
    principal: PrincipalDep,
    runtime: RuntimeDep,
    agent_type: AgentType | None = None,
    status: AgentStatus | None = None,
    version: str | None = None,
    name: Annotated[str | None, Query(max_length=253, description="substring")] = None,
    flag: AgentFlag | None = None,
    label: Annotated[str | None, Query(description="k=v")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Page[AgentPublic]:
    principal.require(Scope.AGENTS_READ)
    stale = runtime.settings.agent_stale_seconds
    now = utcnow()
    query = select(Agent).where(
        Agent.client_id == principal.client_id, Agent.environment_id == principal.environment_id
    )
    if agent_type:
        query = query.where(Agent.agent_type == agent_type.value)
    if version:
        query = query.where(Agent.version == version)
    if name:
        query = query.where(col(Agent.name).contains(name))
    agents = session.exec(query.order_by(col(Agent.agent_type), col(Agent.name))).all()
    evidence_ids = (
        set(
            session.exec(
                select(AgentEvidence.agent_id).where(
                    col(AgentEvidence.agent_id).in_([a.id for a in agents])
                )
            ).all()
        )
        if agents
        else set()
    )
    refused = refused_by_agent(session, [a.id for a in agents])
    views = [
        agent_public(
            a,
            stale_seconds=stale,
            now=now,
            has_evidence=a.id in evidence_ids,
            refused=refused.get(a.id, (0, None)),
        )
        for a in agents
    ]
    if status:
        views = [v for v in views if v.status == status]
    if flag:
        views = [v for v in views if flag in v.flags]
    if label:
        k, _, v = label.partition("=")
        views = [x for x in views if x.labels.get(k) == v]
    return Page[AgentPublic](
        items=views[offset : offset + limit], total=len(views), limit=limit, offset=offset
    )


@router.get("/{agent_id}", response_model=AgentDetail, responses=_ERRORS)
def get_agent(
    agent_id: str, session: SessionDep, principal: PrincipalDep, runtime: RuntimeDep
) -> AgentDetail:
    agent = _load(session, agent_id, principal, Scope.AGENTS_READ)
    return agent_detail(session, agent, stale_seconds=runtime.settings.agent_stale_seconds)


async def _write_then_apply(runtime: ConsoleRuntime, work: Callable[[], T]) -> T:
    result = await run_in_threadpool(work)
    await runtime.apply_identities()
    return result


@router.post("/{agent_id}/release-identity", response_model=AgentPublic, responses=_ERRORS)
async def release(agent_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> AgentPublic:
    """Free the record's name so the next enrollment re-binds it (same id, links, history).

    Refuses a revoked agent and one seen within the quiet window."""

    def work() -> AgentPublic:
        with Session(runtime.engine, expire_on_commit=False) as session:
            agent = _load(session, agent_id, principal, Scope.AGENTS_WRITE)
            release_identity(
                session,
                agent=agent,
                quiet_seconds=runtime.settings.identity_quiet_seconds,
                actor=f"api token {principal.name!r}",
            )
            session.commit()
            return agent_public(agent, stale_seconds=runtime.settings.agent_stale_seconds)

    result: AgentPublic = await _write_then_apply(runtime, work)
    return result


@router.post("/{agent_id}/revoke", response_model=AgentPublic, responses=_ERRORS)
async def revoke_agent(agent_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> AgentPublic:
    """Revoke the identity: its live NATS connection is cut and it is never re-bound."""

    def work() -> AgentPublic:
        with Session(runtime.engine, expire_on_commit=False) as session:
            agent = _load(session, agent_id, principal, Scope.AGENTS_WRITE)
            revoke(session, agent=agent, actor=f"api token {principal.name!r}")
            session.commit()
            return agent_public(agent, stale_seconds=runtime.settings.agent_stale_seconds)

    result: AgentPublic = await _write_then_apply(runtime, work)
    return result


@router.post(
    "/{agent_id}/rotate-credentials",
    response_model=RotationResult,
    responses=errors(401, 403, 404, 409, 504),
)
async def rotate_credentials(
    agent_id: str, principal: PrincipalDep, runtime: RuntimeDep
) -> RotationResult:
    """Ask the online agent for a new key, signed by its current one; wait for it to land."""
    settings = runtime.settings

    def begin() -> str:
        with Session(runtime.engine, expire_on_commit=False) as session:
            agent = _load(session, agent_id, principal, Scope.AGENTS_WRITE)
            rotation = start_rotation(
                session,
                agent=agent,
                stale_seconds=settings.agent_stale_seconds,
                timeout_seconds=settings.rotation_timeout_seconds,
            )
            session.commit()
            return rotation.nonce

    nonce = await run_in_threadpool(begin)
    waiter = runtime.rotation_waiters.setdefault(nonce, asyncio.Event())
    try:
        await runtime.send_command(agent_id, CommandKind.ROTATE_CREDENTIALS, {"nonce": nonce})

        def done() -> CredentialRotation | None:
            with Session(runtime.engine) as session:
                row = session.exec(
                    select(CredentialRotation).where(CredentialRotation.nonce == nonce)
                ).first()
                return row if row is not None and row.completed_at is not None else None

        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.rotation_timeout_seconds
        while loop.time() < deadline:
            row = await run_in_threadpool(done)
            if row is not None:
                assert row.new_public_key and row.completed_at
                return RotationResult(
                    agent_id=agent_id, public_key=row.new_public_key, rotated_at=row.completed_at
                )
            try:  # woken at once by the proof in this process; polled for other replicas
                await asyncio.wait_for(waiter.wait(), 0.5)
            except TimeoutError:
                pass
    finally:
        runtime.rotation_waiters.pop(nonce, None)
    raise GatewayTimeoutError(
        "rotation_timed_out",
        f"agent {agent_id} did not present a new key within "
        f"{settings.rotation_timeout_seconds:g} s",
        agent_id=agent_id,
    )
