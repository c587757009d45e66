"""Planning a rollout: eligibility and waves decided once, at creation, and stored; then the
fleet-rollout deployment is started in Prefect once the record has committed."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlmodel import Session, select

from console.auth import Principal
from console.core.clock import utcnow
from console.errors import BadRequestError
from console.models import PLANNED_WAVES, Agent, PlannedWave, Rollout, RolloutTarget
from console.prefect_api import PrefectApi, PrefectApiError
from console.services.agent_records import is_online
from console.services.artifacts import check_source, check_version
from console.services.rollouts.reads import present
from console.services.rollouts.records import (
    load,
    threshold_policy,
)
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.rollouts import (
    ExclusionPublic,
    RolloutCreate,
    RolloutPublic,
)
from contracts.vocabulary import CommandFailureKind, ErrorReason, RolloutState, Scope, TargetStatus
from rollout_policy import (
    AgentId,
    AgentSnapshot,
    EnvironmentId,
    FactorGrowth,
    PercentGrowth,
    RolloutPolicyError,
    Selector,
    WavePolicy,
    evaluate_eligibility,
    parse_version_range,
    plan_waves,
)

log = logging.getLogger(__name__)


def _snapshot(agent: Agent, *, stale_seconds: float, now: datetime) -> AgentSnapshot:
    online = is_online(agent, stale_seconds=stale_seconds, now=now)
    return AgentSnapshot(
        agent_id=AgentId(agent.id),
        environment_id=EnvironmentId(agent.environment_id),
        agent_type=agent.agent_type,
        version=agent.version,
        online=online,
        labels=dict(agent.labels),
        revoked=agent.revoked_at is not None,
        shared_identity=agent.shared_identity_since is not None,
        can_self_update=agent.can_self_update,
        self_update_blocker=None
        if agent.can_self_update
        else blocker_text(agent.self_update_blocker),
    )


_BLOCKER_TEXT = {
    CommandFailureKind.NOT_SELF_UPDATABLE: "runs from a container image: upgrade it with "
    "helm upgrade",
    CommandFailureKind.NO_SIGNING_KEY: "the agent has no signing public key "
    "(PROXIMA_SIGNING_PUBLIC_KEY) and refuses to install unsigned builds",
    CommandFailureKind.NOT_SINGLE_FILE_BUILD: "the agent does not run from a single-file build "
    "it could replace (installed from a package or run from source)",
    CommandFailureKind.READ_ONLY_PROGRAM: "the agent's program file or its directory is not "
    "writable (read-only program path)",
}


def blocker_text(kind: str | None) -> str | None:
    """Why an agent cannot self-update, for people, from the kind its heartbeat reports; None
    when it did not say (an agent that predates ``self_update_blocker``, or not heartbeat yet)."""
    if kind is None:
        return None
    try:
        return _BLOCKER_TEXT.get(CommandFailureKind(kind), f"the agent reports {kind}")
    except ValueError:
        return f"the agent reports {kind}"


def _policies(body: RolloutCreate) -> tuple[Any, WavePolicy]:
    """The version range and wave policy the body asks for; a bad one is a 400."""
    try:
        version_range = parse_version_range(body.selector.version_range)
        threshold_policy(body.criteria)
        growth: PercentGrowth | FactorGrowth = (
            FactorGrowth(body.waves.growth_factor)
            if body.waves.growth_factor is not None
            else PercentGrowth(tuple(body.waves.percentages or (100.0,)))
        )
        wave_policy = WavePolicy(
            canary_size=body.waves.canary_size,
            growth=growth,
            max_wave_size=body.waves.max_wave_size,
        )
    except (RolloutPolicyError, ValueError) as exc:
        raise BadRequestError(ErrorReason.INVALID_ROLLOUT, str(exc)) from exc
    return version_range, wave_policy


def create_rollout(
    session: Session,
    *,
    client_id: str,
    environment_id: str,
    body: RolloutCreate,
    stale_seconds: float,
    now: datetime | None = None,
) -> Rollout:
    now = now or utcnow()
    version_range, wave_policy = _policies(body)
    agents = session.exec(
        select(Agent).where(Agent.client_id == client_id, Agent.environment_id == environment_id)
    ).all()
    by_id = {a.id: a for a in agents}
    selector = Selector(
        environment_id=EnvironmentId(environment_id),
        agent_types=frozenset(t.value for t in body.selector.agent_types),
        labels=dict(body.selector.labels),
        version_range=version_range,
        agent_ids=frozenset(AgentId(i) for i in body.selector.agent_ids),
    )
    report = evaluate_eligibility(
        selector,
        [_snapshot(a, stale_seconds=stale_seconds, now=now) for a in agents],
        body.artifact.version,
    )
    rollout_id = uuid.uuid4().hex
    seed = body.seed or rollout_id
    plan = plan_waves(report.eligible, wave_policy, seed)
    rollout = Rollout(
        id=rollout_id,
        client_id=client_id,
        environment_id=environment_id,
        name=body.name,
        target_version=body.artifact.version,
        artifact=body.artifact.model_dump(),
        selector=body.selector.model_dump(mode="json"),
        wave_spec=body.waves.model_dump(),
        criteria=[c.model_dump(mode="json") for c in body.criteria],
        waves=PLANNED_WAVES.dump_python(
            [
                PlannedWave(index=w.index, kind=str(w.kind), size=len(w.agent_ids))
                for w in plan.waves
            ]
        ),
        exclusions=[
            ExclusionPublic(
                agent_id=e.agent_id,
                agent_name=by_id[e.agent_id].name,
                reason=str(e.reason),
                detail=e.detail,
            ).model_dump()
            for e in report.excluded
        ],
        wave_timeout_seconds=body.wave_timeout_seconds,
        seed=seed,
        created_at=now,
    )
    session.add(rollout)
    session.flush()
    rows = [
        {
            "rollout_id": rollout_id,
            "agent_id": agent_id,
            "agent_name": by_id[agent_id].name,
            "wave": wave.index,
            "status": TargetStatus.PENDING.value,
            "old_version": by_id[agent_id].version,
        }
        for wave in plan.waves
        for agent_id in wave.agent_ids
    ]
    if rows:  # one executemany: no ORM object per target (20,000 of them cost seconds)
        session.execute(insert(RolloutTarget.__table__), rows)  # type: ignore[attr-defined]
    return rollout


async def create(
    rt: ServiceRuntime, principal: Principal, body: RolloutCreate, *, base_url: str | None = None
) -> RolloutPublic:
    """Decide eligibility and waves now, record them, and (after commit) start the fleet-rollout
    deployment; when it cannot start, the pending rollout says why it waits. The artifact must
    come from this Console (``base_url``: the URL agents use) or PROXIMA_ARTIFACT_URL_ALLOW."""
    principal.require(Scope.ROLLOUTS_WRITE)
    settings = rt.settings
    check_version(body.artifact.version)
    await check_source(rt, principal, body.artifact, base_url=base_url)

    def work(uow: UnitOfWork) -> str:
        rollout = create_rollout(
            uow.session,
            client_id=principal.client_id,
            environment_id=principal.environment_id,
            body=body,
            stale_seconds=settings.agent_stale_seconds,
        )
        if body.start_flow:
            uow.after_commit(lambda: _start_flow(rt, rollout.id))
        return rollout.id

    rollout_id = await rt.units.run(work, write=True)
    return await rt.units.run(lambda uow: present(uow.session, load(uow.session, rollout_id), True))


async def _start_flow(rt: ServiceRuntime, rollout_id: str) -> None:
    settings = rt.settings
    if not settings.prefect_api_url:
        note = (
            "PROXIMA_PREFECT_API_URL is not set: start the fleet-rollout deployment with "
            f"rollout_id={rollout_id}"
        )
        await rt.units.run(lambda uow: _set_note(uow, rollout_id, note), write=True)
        return
    try:
        flow_run_id = await PrefectApi(settings.prefect_api_url).start_deployment(
            settings.rollout_deployment, {"rollout_id": rollout_id}
        )
    except (PrefectApiError, Exception) as exc:  # the record stays; say why it waits
        note = f"could not start Prefect deployment {settings.rollout_deployment}: {exc}"
        await rt.units.run(lambda uow: _set_note(uow, rollout_id, note), write=True)
        return
    await rt.units.run(lambda uow: _set_flow_run(uow, rollout_id, flow_run_id), write=True)


def _set_flow_run(uow: UnitOfWork, rollout_id: str, flow_run_id: uuid.UUID) -> None:
    rollout = load(uow.session, rollout_id)
    rollout.flow_run_id = str(flow_run_id)
    uow.session.add(rollout)


def _set_note(uow: UnitOfWork, rollout_id: str, note: str) -> None:
    rollout = load(uow.session, rollout_id)
    if rollout.state == RolloutState.PENDING:
        rollout.state_reason = note
        uow.session.add(rollout)
