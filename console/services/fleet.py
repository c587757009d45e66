"""The fleet as people and flows read it: the filtered agent list, one agent with its history,
and the versions the fleet runs."""

from __future__ import annotations

from sqlmodel import col, select

from console.auth import Principal
from console.core.clock import utcnow
from console.models import Agent, AgentEvidence
from console.schemas import Scope
from console.services.agent_records import load_agent
from console.services.presenters import agent_detail, agent_public, refused_by_agent
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.agent_types import AgentType
from contracts.views import AgentDetailView, AgentPage, AgentView
from contracts.vocabulary import AgentFlag, AgentStatus


async def list_agents(
    rt: ServiceRuntime,
    principal: Principal,
    *,
    agent_type: AgentType | None = None,
    status: AgentStatus | None = None,
    version: str | None = None,
    name: str | None = None,
    flag: AgentFlag | None = None,
    label: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> AgentPage:
    """The caller's environment's agents, filtered; status and flags computed now."""
    principal.require(Scope.AGENTS_READ)
    stale = rt.settings.agent_stale_seconds

    def work(uow: UnitOfWork) -> list[AgentView]:
        session = uow.session
        query = select(Agent).where(
            Agent.client_id == principal.client_id,
            Agent.environment_id == principal.environment_id,
        )
        if agent_type:
            query = query.where(Agent.agent_type == agent_type.value)
        if version:
            query = query.where(Agent.version == version)
        if name:
            query = query.where(col(Agent.name).contains(name))
        agents = session.exec(query.order_by(col(Agent.agent_type), col(Agent.name))).all()
        ids = [a.id for a in agents]
        evidence_ids = (
            set(
                session.exec(
                    select(AgentEvidence.agent_id).where(col(AgentEvidence.agent_id).in_(ids))
                ).all()
            )
            if agents
            else set()
        )
        refused = refused_by_agent(session, ids)
        now = utcnow()
        return [
            agent_public(
                a,
                stale_seconds=stale,
                now=now,
                has_evidence=a.id in evidence_ids,
                refused=refused.get(a.id, (0, None)),
            )
            for a in agents
        ]

    views = await rt.units.run(work)
    if status:
        views = [v for v in views if v.status == status]
    if flag:
        views = [v for v in views if flag in v.flags]
    if label:
        k, _, v = label.partition("=")
        views = [x for x in views if x.labels.get(k) == v]
    return AgentPage(
        items=views[offset : offset + limit], total=len(views), limit=limit, offset=offset
    )


async def get_agent(rt: ServiceRuntime, principal: Principal, agent_id: str) -> AgentDetailView:
    def work(uow: UnitOfWork) -> AgentDetailView:
        agent = load_agent(uow.session, agent_id, principal, Scope.AGENTS_READ)
        return agent_detail(uow.session, agent, stale_seconds=rt.settings.agent_stale_seconds)

    return await rt.units.run(work)


async def versions(rt: ServiceRuntime, principal: Principal) -> list[str]:
    """The versions the caller's environment's agents report, sorted."""
    principal.require(Scope.AGENTS_READ)

    def work(uow: UnitOfWork) -> list[str]:
        rows = uow.session.exec(
            select(Agent.version)
            .where(
                Agent.client_id == principal.client_id,
                Agent.environment_id == principal.environment_id,
                col(Agent.version).is_not(None),
            )
            .distinct()
        ).all()
        return sorted(v for v in rows if v)

    return await rt.units.run(work)
