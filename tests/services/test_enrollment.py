"""Enrollment and re-bind, in-process: every rule of ``console.services.identities.enrollment``,
with the Console's clock moved instead of slept through."""

import pytest
from sqlmodel import select

from console.errors import ConflictError
from console.models import Agent, AgentEvent, NatsRevocation
from contracts.vocabulary import ErrorReason
from testkit.services import AgentKey, IdentitiesApplied, InProcessConsole


async def events(services: InProcessConsole, agent_id: str) -> list[str]:
    def work(uow) -> list[str]:
        rows = uow.session.exec(select(AgentEvent).where(AgentEvent.agent_id == agent_id)).all()
        return [e.kind for e in rows]

    return await services.run(work)


async def revocations(services: InProcessConsole) -> dict[str, str]:
    def work(uow) -> dict[str, str]:
        rows = uow.session.exec(select(NatsRevocation)).all()
        return {r.public_key: r.reason for r in rows}

    return await services.run(work)


async def agent(services: InProcessConsole, agent_id: str) -> Agent:
    found = await services.run(lambda uow: uow.session.get(Agent, agent_id))
    assert found is not None
    return found


async def test_a_new_name_creates_a_record(services: InProcessConsole):
    token = await services.install_token()
    answer, created = await services.enroll(AgentKey("web-1", machine_id="m" * 32), token)
    assert created and not answer.rebound
    assert answer.name == "web-1"
    assert await events(services, answer.agent_id) == ["enrolled"]
    assert services.effects.effects == [], "a new record retires no key: NATS is not touched"


async def test_the_same_key_again_is_the_same_record(services: InProcessConsole):
    token = await services.install_token()
    key = AgentKey("web-1")
    first, _ = await services.enroll(key, token)
    services.clock.advance(1)
    again, created = await services.enroll(key, token)
    assert not created and not again.rebound
    assert again.agent_id == first.agent_id


async def test_a_second_live_process_is_refused_name_in_use(services: InProcessConsole):
    token = await services.install_token()
    key = AgentKey("web-1", machine_id="m" * 32)
    first, _ = await services.enroll(key, token)
    services.clock.advance(services.settings.identity_quiet_seconds)  # the boundary: not quiet
    with pytest.raises(ConflictError) as refused:
        await services.enroll(key.new_key(), token)
    assert refused.value.reason == ErrorReason.NAME_IN_USE
    held = await agent(services, first.agent_id)
    assert held.conflict_count == 1 and held.last_conflict_reason == ErrorReason.NAME_IN_USE
    assert "enrollment_conflict" in await events(services, first.agent_id), (
        "the clash is kept on the record although the request failed"
    )


async def test_a_quiet_record_without_evidence_is_refused(services: InProcessConsole):
    token = await services.install_token()
    key = AgentKey("web-1")  # no machine-id, no product uuid
    await services.enroll(key, token)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    with pytest.raises(ConflictError) as refused:
        await services.enroll(key.new_key(), token)
    assert refused.value.reason == ErrorReason.NO_IDENTITY_EVIDENCE


async def test_a_quiet_record_whose_evidence_does_not_match_is_refused(
    services: InProcessConsole,
):
    token = await services.install_token()
    await services.enroll(AgentKey("web-1", machine_id="a" * 32), token)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    with pytest.raises(ConflictError) as refused:
        await services.enroll(AgentKey("web-1", machine_id="b" * 32), token)
    assert refused.value.reason == ErrorReason.IDENTITY_MISMATCH


async def test_a_revoked_record_is_never_rebound(services: InProcessConsole):
    from console.services.identities import revoke_agent

    token = await services.install_token()
    key = AgentKey("web-1", machine_id="m" * 32)
    first, _ = await services.enroll(key, token)
    await revoke_agent(services.rt, services.principal, first.agent_id)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    for presented in (key.new_key(), key):
        with pytest.raises(ConflictError) as refused:
            await services.enroll(presented, token)
        assert refused.value.reason == ErrorReason.AGENT_REVOKED


async def test_a_quiet_record_with_matching_evidence_is_rebound_and_its_key_revoked(
    services: InProcessConsole,
):
    token = await services.install_token()
    old = AgentKey("web-1", machine_id="m" * 32)
    first, _ = await services.enroll(old, token)
    await services.heartbeat(first.agent_id)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    new = old.new_key()
    again, created = await services.enroll(new, token)
    assert not created and again.rebound
    assert again.agent_id == first.agent_id, "re-bind keeps the id"
    history = await events(services, first.agent_id)
    assert history[0] == "enrolled" and history[-1] == "rebound", "and the history"
    assert (await agent(services, first.agent_id)).nats_public_key == new.public_key
    assert await revocations(services) == {old.public_key: "rebound"}
    assert services.effects.effects == [IdentitiesApplied()], "NATS told once, after commit"


async def test_a_released_record_is_rebound_at_once(services: InProcessConsole):
    from console.services.identities import release

    token = await services.install_token()
    old = AgentKey("web-1")
    first, _ = await services.enroll(old, token)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    await release(services.rt, services.principal, first.agent_id)
    services.effects.clear()
    again, created = await services.enroll(AgentKey("web-1"), token)  # no evidence needed
    assert again.rebound and not created and again.agent_id == first.agent_id
    assert services.effects.effects == [], "the release already retired the key"


async def test_a_rebind_cancels_what_was_in_flight_for_the_old_key_and_flags_the_record(
    services: InProcessConsole,
):
    from datetime import timedelta

    from console.models import CredentialRotation, Rollout, RolloutTarget
    from console.services.agent_records import is_recently_rebound

    token = await services.install_token()
    old = AgentKey("web-1", machine_id="m" * 32, product_uuid="u" * 32)
    first, _ = await services.enroll(old, token)
    now = services.clock.now

    def in_flight(uow) -> None:
        held = uow.session.get(Agent, first.agent_id)
        rollout = Rollout(
            client_id=held.client_id,
            environment_id=held.environment_id,
            name="r",
            target_version="0.9.0",
            seed="s",
            state="running",
        )
        uow.session.add(rollout)
        uow.session.flush()
        uow.session.add(
            RolloutTarget(
                rollout_id=rollout.id,
                agent_id=held.id,
                agent_name=held.name,
                wave=0,
                status="dispatched",
                command_id="cmd-1",
                dispatched_at=now,
                deadline_at=now + timedelta(hours=1),
            )
        )
        uow.session.add(
            CredentialRotation(
                agent_id=held.id, nonce="n" * 32, expires_at=now + timedelta(hours=1)
            )
        )

    await services.run(in_flight, write=True)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    machine_id_only = AgentKey("web-1", machine_id="m" * 32)
    with pytest.raises(ConflictError) as refused:
        await services.enroll(machine_id_only, token)
    assert refused.value.reason == ErrorReason.IDENTITY_MISMATCH

    again, _ = await services.enroll(old.new_key(), token)
    assert again.rebound

    def after(uow):
        target = uow.session.exec(select(RolloutTarget)).one()
        rotation = uow.session.exec(select(CredentialRotation)).one()
        return target, rotation, uow.session.get(Agent, first.agent_id)

    target, rotation, record = await services.run(after)
    assert target.status == "timed_out" and "re-bound to another machine" in (target.error or "")
    assert rotation.expires_at <= services.clock.now, "the old key's nonce is dead"
    assert record.rebound_at == services.clock.now
    assert is_recently_rebound(record, services.clock.now)
    assert not is_recently_rebound(record, services.clock.now + timedelta(days=8))


async def test_a_cluster_bound_token_enrolls_only_kubernetes_agents(services: InProcessConsole):
    from console.errors import ForbiddenError
    from contracts.vocabulary import AgentType

    token = await services.install_token(cluster_slug="prod-eu")
    with pytest.raises(ForbiddenError) as refused:
        await services.enroll(AgentKey("web-1", machine_id="m" * 32), token)
    assert refused.value.reason == ErrorReason.INSTALL_TOKEN_SCOPE
    pod = AgentKey("node-1", agent_type=AgentType.K8S_NODE_MONITOR)
    assert (await services.enroll(pod, token))[1]
