"""Agent and token records turned into their API shapes (``console.schemas``); status and
flags are computed here, never stored."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func
from sqlmodel import Session, col, select

from console.core.clock import utcnow
from console.models import (
    Agent,
    AgentEvent,
    AgentEvidence,
    ApiToken,
    InstallToken,
    NatsRevocation,
)
from console.schemas import ApiTokenPublic, InstallTokenPublic
from console.services.agent_records import is_recently_rebound, seconds_since_seen, status
from contracts.views import (
    AgentDetailView,
    AgentEventView,
    AgentView,
    EnrollmentConflictView,
    EvidenceView,
)
from contracts.vocabulary import AgentFlag, AgentType
from rollout_policy import try_parse_version


def agent_flags(
    agent: Agent, *, has_evidence: bool | None = None, refusing_recently: bool = False
) -> list[AgentFlag]:
    flags: list[AgentFlag] = []
    if refusing_recently:
        flags.append(AgentFlag.REFUSED_STILL_CONNECTING)
    if agent.shared_identity_since is not None:
        flags.append(AgentFlag.SHARED_IDENTITY)
    if agent.version_flapping_since is not None:
        flags.append(AgentFlag.VERSION_FLAPPING)
    if agent.last_conflict_at is not None:
        flags.append(AgentFlag.ENROLLMENT_CONFLICT)
    if has_evidence is False:
        flags.append(AgentFlag.NO_IDENTITY_EVIDENCE)
    if not agent.can_self_update:
        flags.append(AgentFlag.CANNOT_SELF_UPDATE)
    if is_recently_rebound(agent, utcnow()):
        flags.append(AgentFlag.REBOUND)
    return flags


def refused_by_agent(
    session: Session, agent_ids: list[str]
) -> dict[str, tuple[int, datetime | None]]:
    """Per agent: connections refused for its retired keys, and the latest."""
    if not agent_ids:
        return {}
    rows = session.exec(
        select(
            NatsRevocation.agent_id,
            func.sum(NatsRevocation.refused_attempts),
            func.max(NatsRevocation.last_refused_at),
        )
        .where(col(NatsRevocation.agent_id).in_(agent_ids))
        .group_by(col(NatsRevocation.agent_id))
    ).all()
    return {a: (int(n or 0), last) for a, n, last in rows}


def agent_public(
    agent: Agent,
    *,
    stale_seconds: float,
    now: datetime | None = None,
    has_evidence: bool | None = None,
    refused: tuple[int, datetime | None] = (0, None),
) -> AgentView:
    now = now or utcnow()
    refused_count, last_refused = refused
    if last_refused is not None and last_refused.tzinfo is None:
        last_refused = last_refused.replace(tzinfo=now.tzinfo)
    refusing_recently = (
        last_refused is not None and (now - last_refused).total_seconds() <= stale_seconds
    )
    conflict = None
    if agent.last_conflict_at is not None:
        conflict = EnrollmentConflictView(
            reason=agent.last_conflict_reason,
            last_at=agent.last_conflict_at.isoformat(),
            count=agent.conflict_count,
        )
    return AgentView(
        id=agent.id,
        client_id=agent.client_id,
        environment_id=agent.environment_id,
        agent_type=AgentType(agent.agent_type),
        name=agent.name,
        # A stored version outside the one rule (written before heartbeats were bounded) is
        # unknown: never served, never compared.
        version=agent.version if try_parse_version(agent.version) else None,
        instance_id=agent.instance_id,
        cluster_slug=agent.cluster_slug,
        status=status(agent, stale_seconds=stale_seconds, now=now),
        enrolled_at=agent.enrolled_at,
        last_seen_at=agent.last_seen_at,
        seconds_since_seen=seconds_since_seen(agent, now),
        can_self_update=agent.can_self_update,
        labels=agent.labels,
        flags=agent_flags(agent, has_evidence=has_evidence, refusing_recently=refusing_recently),
        refused_connections=refused_count,
        last_refused_at=last_refused,
        conflict=conflict,
        heartbeat_interval_seconds=agent.heartbeat_interval_seconds,
        metrics_interval_seconds=agent.metrics_interval_seconds,
        sync_interval_seconds=agent.sync_interval_seconds,
        released_at=agent.released_at,
        revoked_at=agent.revoked_at,
        credentials_rotated_at=agent.credentials_rotated_at,
    )


def agent_detail(session: Session, agent: Agent, *, stale_seconds: float) -> AgentDetailView:
    evidence = session.exec(select(AgentEvidence).where(AgentEvidence.agent_id == agent.id)).all()
    events = session.exec(
        select(AgentEvent)
        .where(AgentEvent.agent_id == agent.id)
        .order_by(col(AgentEvent.at).desc(), col(AgentEvent.id).desc())
        .limit(100)
    ).all()
    base = agent_public(
        agent,
        stale_seconds=stale_seconds,
        has_evidence=bool(evidence),
        refused=refused_by_agent(session, [agent.id]).get(agent.id, (0, None)),
    )
    return AgentDetailView(
        **dict(base),
        evidence=[
            EvidenceView(
                kind=e.kind,
                source=e.source,
                first_seen_at=e.first_seen_at,
                last_seen_at=e.last_seen_at,
            )
            for e in evidence
        ],
        history=[
            AgentEventView(at=e.at, kind=e.kind, message=e.message, detail=e.detail) for e in events
        ],
        last_metrics=agent.last_metrics,
    )


def install_token_state(token: InstallToken, now: datetime) -> str:
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= now:
        return "expired"
    if token.max_uses is not None and token.uses >= token.max_uses:
        return "used_up"
    return "active"


def install_token_public(token: InstallToken, now: datetime | None = None) -> InstallTokenPublic:
    now = now or utcnow()
    # the shared columns by name (``TokenBase`` / ``TokenPublic``), the hash left out
    return InstallTokenPublic.model_validate(
        {**token.model_dump(), "state": install_token_state(token, now)}
    )


def api_token_public(t: ApiToken) -> ApiTokenPublic:
    return ApiTokenPublic.model_validate(t.model_dump())
