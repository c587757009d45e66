"""The fleet as people and flows read it: the filtered agent list, one agent with its history,
and the versions the fleet runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import ColumnElement, func, literal, or_, union_all
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from console.auth import Principal
from console.core.clock import utcnow
from console.models import ENV_LAST_SEEN, Agent, AgentEvidence, Environment
from console.services.agent_records import load_agent
from console.services.fleet_filters import flag_condition, label_condition, status_ranges
from console.services.presenters import agent_detail, agent_public, refused_by_agent
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.views import AgentDetailView, AgentFilter, AgentPage
from contracts.vocabulary import Scope

TOTAL_COUNT_CAP: Final = 1_000
"""A page counts its matches up to this many (``total_capped`` past it): counting every match
would make the cost of one page grow with the fleet."""


def _filtered(
    principal: Principal,
    filters: AgentFilter,
    *,
    status: ColumnElement[bool] | None,
    now: datetime,
    stale_seconds: float,
) -> SelectOfScalar[str]:
    """The ids of the caller's environment's agents that match, as one query. It filters on
    the environment alone (an environment belongs to one client, checked once per page by
    ``_environment_is_callers``) so that indexes led by ``environment_id`` cover it."""
    query = select(Agent.id).where(Agent.environment_id == principal.environment_id)
    if filters.agent_type:
        query = query.where(Agent.agent_type == filters.agent_type.value)
    if filters.version:
        query = query.where(Agent.version == filters.version)
    if filters.name:
        query = query.where(col(Agent.name).contains(filters.name, autoescape=True))
    if status is not None:
        query = query.where(status)
    if filters.flag:
        query = query.where(flag_condition(filters.flag, now=now, stale_seconds=stale_seconds))
    for key, value in filters.labels.items():
        query = query.where(label_condition(key, value))
    return query


def _environment_is_callers(session: Session, principal: Principal) -> bool:
    environment = session.get(Environment, principal.environment_id)
    return environment is not None and environment.client_id == principal.client_id


_ORDER = (col(Agent.agent_type), col(Agent.name), col(Agent.id))


def _count(parts: list[SelectOfScalar[str]]) -> Any:
    """Matches counted up to the cap, each part (one index range) on its own: no table read
    where the index covers the filters."""
    if len(parts) == 1:
        capped = parts[0].with_only_columns(literal(1)).limit(TOTAL_COUNT_CAP + 1).subquery()
    else:
        both = union_all(*(p.with_only_columns(literal(1)) for p in parts)).subquery()
        capped = select(literal(1)).select_from(both).limit(TOTAL_COUNT_CAP + 1).subquery()
    return select(func.count()).select_from(capped)


def _page(
    session: Session,
    matching: SelectOfScalar[str],
    parts: list[SelectOfScalar[str]],
    total: int,
    *,
    limit: int,
    offset: int,
) -> Sequence[str]:
    """The page's ids in the list's order. None: none. Few matches (the capped count did not
    reach the cap): found the way the count found them (a status index's ranges), then
    ordered — walking the ordering index instead would read every record of the environment
    to find, say, the few offline ones (85 ms at 100,000 agents on SQLite). Many: walking the
    ordering index finds a page's worth after a few rows, where sorting every match would
    not."""
    if total == 0:
        return []
    if total <= TOTAL_COUNT_CAP:
        if len(parts) == 1:
            few = session.exec(parts[0].limit(TOTAL_COUNT_CAP + 1)).all()
        else:
            # SQLite's planner reads the whole table for "never seen" when it must return
            # ids (it takes the index for the count): the ranges' index, said outright.
            hinted = [p.with_hint(Agent, f"INDEXED BY {ENV_LAST_SEEN}", "sqlite") for p in parts]
            both = union_all(*hinted).subquery()
            few = session.exec(select(both.c.id).limit(TOTAL_COUNT_CAP + 1)).all()
        if not few:
            return []
        matching = select(Agent.id).where(col(Agent.id).in_(few))
    return session.exec(matching.order_by(*_ORDER).limit(limit).offset(offset)).all()


async def list_agents(
    rt: ServiceRuntime, principal: Principal, filters: AgentFilter | None = None
) -> AgentPage:
    """One page of the caller's environment's agents, filtered, counted and cut in SQL in a
    stable order (type, name, id); status and flags computed for the page's records only."""
    principal.require(Scope.AGENTS_READ)
    filters = filters or AgentFilter()
    status, limit, offset = filters.status, filters.limit, filters.offset
    stale = rt.settings.agent_stale_seconds

    def work(uow: UnitOfWork) -> AgentPage:
        session = uow.session
        now = utcnow()

        def query(condition: ColumnElement[bool] | None) -> SelectOfScalar[str]:
            return _filtered(principal, filters, status=condition, now=now, stale_seconds=stale)

        ranges = status_ranges(status, now=now, stale_seconds=stale) if status else []
        parts = [query(condition) for condition in ranges] or [query(None)]
        # their OR, for walking the ordering index
        matching = parts[0] if len(parts) == 1 else query(or_(*ranges))
        if not _environment_is_callers(session, principal):
            return AgentPage(items=[], total=0, limit=limit, offset=offset)
        total = session.exec(_count(parts)).one()
        page_ids = _page(session, matching, parts, total, limit=limit, offset=offset)
        agents = (
            session.exec(select(Agent).where(col(Agent.id).in_(page_ids)).order_by(*_ORDER)).all()
            if page_ids
            else []
        )
        with_evidence = (
            set(
                session.exec(
                    select(AgentEvidence.agent_id).where(col(AgentEvidence.agent_id).in_(page_ids))
                ).all()
            )
            if page_ids
            else set()
        )
        refused = refused_by_agent(session, list(page_ids))
        return AgentPage(
            items=[
                agent_public(
                    a,
                    stale_seconds=stale,
                    now=now,
                    has_evidence=a.id in with_evidence,
                    refused=refused.get(a.id, (0, None)),
                )
                for a in agents
            ],
            total=min(total, TOTAL_COUNT_CAP),
            total_capped=total > TOTAL_COUNT_CAP,
            limit=limit,
            offset=offset,
        )

    return await rt.units.run(work)


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
