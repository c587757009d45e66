"""Resending commands that may have been lost (core NATS is fire-and-forget): a dispatched
target with no result has its command sent again — the SAME command id and args, so the
agent's ledger runs it once — once its last send is ``PROXIMA_COMMAND_RESEND_SECONDS`` old, and
at once after a NATS reconnect; never to a revoked agent, never after its result, and by one
replica at a time (the ``command-resends`` lease)."""

from console.services.identities import revoke_agent
from console.services.maintenance import Maintenance
from console.services.rollouts import dispatch, lifecycle, planning
from console.services.rollouts.resend import RESENT, Resender
from contracts.messages import CommandStatus
from contracts.rollouts import ArtifactRef, RolloutCreate
from rollout_policy import EventKind
from testkit.services import InProcessConsole

ARTIFACT = ArtifactRef(
    version="0.9.0",
    url="http://artifacts.invalid/proxima-agent-0.9.0.pyz",
    sha256="0" * 64,
    signature="s" * 43,
)


async def _canary_sent(services: InProcessConsole):
    await services.add_agents(20)
    rollout = await planning.create(
        services.rt, services.principal, RolloutCreate(artifact=ARTIFACT, seed="s")
    )
    await lifecycle.transition(services.rt, services.principal, rollout.id, EventKind.START)
    await dispatch.dispatch(services.rt, services.principal, rollout.id, 0)
    (canary,) = services.effects.commands
    return canary


def _resent() -> float:
    return RESENT._value.get()  # type: ignore[attr-defined]


async def test_an_old_send_without_a_result_is_sent_again_with_the_same_id_and_a_fresh_one_not(
    services: InProcessConsole,
):
    canary = await _canary_sent(services)
    resender = Resender(services.rt, holder="replica-a")
    assert services.settings.command_resend_seconds == 10.0
    before = _resent()
    services.clock.advance(9)
    assert await resender.resend() == 0, "a send 9 s old is fresh"
    assert len(services.effects.commands) == 1
    services.clock.advance(2)
    assert await resender.resend() == 1
    again = services.effects.commands[-1]
    assert again == canary, "the same agent, command id, kind and args"
    assert _resent() == before + 1
    assert await resender.resend() == 0, "just sent again: fresh for another 10 s"
    services.clock.advance(11)
    assert await resender.resend() == 1
    await services.result(canary, CommandStatus.SUCCEEDED, new_version="0.9.0")
    services.clock.advance(11)
    assert await resender.resend() == 0, "a target with its result is never sent again"
    assert len(services.effects.commands) == 3


async def test_a_reconnect_resends_at_once_and_the_sweep_waits_for_its_age(
    services: InProcessConsole,
):
    canary = await _canary_sent(services)
    maintenance = Maintenance(services.rt, holder="replica-a")
    services.clock.advance(1)
    assert await maintenance.resend_commands() == 0
    assert await maintenance.resend_now() == 1, "sent before the reconnect: maybe lost with it"
    assert services.effects.commands[-1] == canary


async def test_one_replica_resends_at_a_time_and_never_to_a_revoked_agent(
    services: InProcessConsole,
):
    canary = await _canary_sent(services)
    a = Resender(services.rt, holder="replica-a")
    b = Resender(services.rt, holder="replica-b")
    services.clock.advance(11)
    assert await a.resend() == 1
    assert await b.resend() is None, "replica-a holds the lease"
    await revoke_agent(services.rt, services.principal, canary.agent_id)
    sent = len(services.effects.commands)
    services.clock.advance(11)
    assert await a.resend() == 0
    assert len(services.effects.commands) == sent
