"""Release (and its dry run), revoke, and "online", in-process: the identity rules of
``console.services.identities.lifecycle`` and the status every view shows."""

import pytest
from sqlmodel import select

from console.errors import ConflictError
from console.models import Agent, AgentEvent, NatsRevocation
from console.services import fleet
from console.services.identities import release, revoke_agent, rotate_credentials
from contracts.views import AgentFilter
from contracts.vocabulary import AgentStatus, ErrorReason
from testkit.services import AgentKey, IdentitiesApplied, InProcessConsole


async def enrolled(services: InProcessConsole, name: str = "web-1") -> str:
    token = await services.install_token()
    answer, _ = await services.enroll(AgentKey(name, machine_id="m" * 32), token)
    return answer.agent_id


async def snapshot(services: InProcessConsole, agent_id: str) -> tuple[object, ...]:
    """Everything a release touches: the record, its events, the revocations."""

    def work(uow) -> tuple[object, ...]:
        agent = uow.session.get(Agent, agent_id)
        return (
            agent.nats_public_key,
            agent.released_at,
            len(uow.session.exec(select(AgentEvent)).all()),
            len(uow.session.exec(select(NatsRevocation)).all()),
        )

    return await services.run(work)


async def status(services: InProcessConsole, agent_id: str) -> AgentStatus:
    return (await fleet.get_agent(services.rt, services.principal, agent_id)).status


# -- release ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dry_run", [False, True])
async def test_release_refuses_an_agent_seen_within_the_quiet_window(
    services: InProcessConsole, dry_run: bool
):
    agent_id = await enrolled(services)
    services.clock.advance(services.settings.identity_quiet_seconds)  # the boundary counts
    before = await snapshot(services, agent_id)
    with pytest.raises(ConflictError) as refused:
        await release(services.rt, services.principal, agent_id, dry_run=dry_run)
    assert refused.value.reason == ErrorReason.AGENT_RECENTLY_SEEN
    assert await snapshot(services, agent_id) == before
    assert services.effects.effects == []


@pytest.mark.parametrize("dry_run", [False, True])
async def test_release_refuses_a_revoked_agent(services: InProcessConsole, dry_run: bool):
    agent_id = await enrolled(services)
    await revoke_agent(services.rt, services.principal, agent_id)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    services.effects.clear()
    with pytest.raises(ConflictError) as refused:
        await release(services.rt, services.principal, agent_id, dry_run=dry_run)
    assert refused.value.reason == ErrorReason.AGENT_REVOKED
    assert services.effects.effects == []


async def test_release_frees_a_quiet_name_and_retires_its_key_after_commit(
    services: InProcessConsole,
):
    agent_id = await enrolled(services)
    key = (await services.run(lambda uow: uow.session.get(Agent, agent_id))).nats_public_key
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    answer = await release(services.rt, services.principal, agent_id)
    assert answer.status == AgentStatus.RELEASED
    public_key, released_at, _, _ = await snapshot(services, agent_id)
    assert public_key is None and released_at == services.clock.now
    revoked = await services.run(lambda uow: uow.session.get(NatsRevocation, key))
    assert revoked is not None and revoked.reason == "released"
    assert services.effects.effects == [IdentitiesApplied()]


async def test_the_dry_run_answers_as_the_release_would_and_changes_nothing(
    services: InProcessConsole,
):
    agent_id = await enrolled(services)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    before = await snapshot(services, agent_id)
    predicted = await release(services.rt, services.principal, agent_id, dry_run=True)
    assert predicted.status == AgentStatus.RELEASED
    assert await snapshot(services, agent_id) == before, "nothing changed"
    assert services.effects.effects == [], "and no effect ran"
    assert await status(services, agent_id) == AgentStatus.OFFLINE
    done = await release(services.rt, services.principal, agent_id)
    # The record is the same; only the decision part says "would" vs "did".
    decision = {"released_at", "outcome", "message", "dry_run"}
    assert done.model_dump(exclude=decision) == predicted.model_dump(exclude=decision)
    assert predicted.dry_run and not done.dry_run
    assert (predicted.outcome, done.outcome) == ("would_release", "released")


async def test_releasing_a_released_record_again_is_harmless(services: InProcessConsole):
    agent_id = await enrolled(services)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    await release(services.rt, services.principal, agent_id)
    before = await snapshot(services, agent_id)
    again = await release(services.rt, services.principal, agent_id)
    assert again.status == AgentStatus.RELEASED
    assert await snapshot(services, agent_id) == before


# -- "online" --------------------------------------------------------------------------------------


async def test_online_until_the_stale_timeout_passes_then_offline_until_a_heartbeat(
    services: InProcessConsole,
):
    agent_id = await enrolled(services)
    stale = services.settings.agent_stale_seconds
    assert await status(services, agent_id) == AgentStatus.ONLINE, "enrollment is a sign of life"
    services.clock.advance(stale)
    assert await status(services, agent_id) == AgentStatus.ONLINE, "the boundary is online"
    services.clock.advance(1)
    assert await status(services, agent_id) == AgentStatus.OFFLINE
    await services.heartbeat(agent_id)
    assert await status(services, agent_id) == AgentStatus.ONLINE


async def test_released_and_revoked_agents_are_never_online(services: InProcessConsole):
    released = await enrolled(services, "web-1")
    revoked = await enrolled(services, "web-2")
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    await release(services.rt, services.principal, released)
    await revoke_agent(services.rt, services.principal, revoked)
    for agent_id in (released, revoked):
        await services.heartbeat(agent_id)  # a heartbeat does not bring either back
    page = await fleet.list_agents(services.rt, services.principal)
    assert {a.name: a.status for a in page.items} == {
        "web-1": AgentStatus.RELEASED,
        "web-2": AgentStatus.REVOKED,
    }
    online = await fleet.list_agents(
        services.rt, services.principal, AgentFilter(status=AgentStatus.ONLINE)
    )
    assert online.total == 0


async def test_rotation_needs_the_agent_online(services: InProcessConsole):
    agent_id = await enrolled(services)
    services.clock.advance(services.settings.agent_stale_seconds + 1)
    with pytest.raises(ConflictError) as refused:
        await rotate_credentials(services.rt, services.principal, agent_id)
    assert refused.value.reason == "agent_offline"
    assert services.effects.commands == [], "no command is sent to an offline agent"
