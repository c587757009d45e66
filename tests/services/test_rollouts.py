"""Rollouts, in-process: planning with the default policy, idempotent dispatch (marked
dispatched, committed, then published), results crossing the threshold, timeouts."""

from uuid import UUID

import pytest
from sqlmodel import Session

import console.services.unit_of_work as unit_of_work
from console.errors import ConflictError
from console.services.identities import revoke_agent
from console.services.rollouts import dispatch, lifecycle, planning, reads
from console.services.rollouts.records import command_id_for
from contracts.messages import CommandKind, CommandStatus
from contracts.rollouts import ArtifactRef, CriterionSpec, RolloutCreate, RolloutPublic
from contracts.vocabulary import ErrorReason, RolloutState, TargetStatus
from rollout_policy import DEFAULT_CRITERION, DEFAULT_ROLLOUT_POLICY, AgentId, EventKind, plan_waves
from testkit.services import AgentKey, CommandSent, FlowResumed, FlowStarted, InProcessConsole

ARTIFACT = ArtifactRef(
    version="0.9.0",
    url="http://artifacts.invalid/proxima-agent-0.9.0.pyz",
    sha256="0" * 64,
    signature="s" * 43,
)


async def fleet(services: InProcessConsole, count: int) -> dict[str, str]:
    """``count`` online 0.8.0 host agents: name → id."""
    return await services.add_agents(count)


async def create(services: InProcessConsole, **body: object) -> RolloutPublic:
    return await planning.create(
        services.rt, services.principal, RolloutCreate(artifact=ARTIFACT, seed="s", **body)
    )


async def start(services: InProcessConsole, rollout_id: str) -> None:
    await lifecycle.transition(services.rt, services.principal, rollout_id, EventKind.START)


async def send(services: InProcessConsole, rollout_id: str, wave: int):
    return await dispatch.dispatch(services.rt, services.principal, rollout_id, wave)


# -- planning --------------------------------------------------------------------------------------


async def test_a_rollout_without_a_policy_gets_the_default_policy_and_its_waves(
    services: InProcessConsole,
):
    ids = await fleet(services, 20)
    rollout = await create(services)
    policy = DEFAULT_ROLLOUT_POLICY
    expected = plan_waves([AgentId(i) for i in ids.values()], policy.waves, "s")
    assert [w.size for w in rollout.waves] == [len(w.agent_ids) for w in expected.waves]
    assert rollout.waves[0].kind == "canary" and rollout.waves[0].size == 1
    assert sum(w.size for w in rollout.waves) == 20
    (criterion,) = rollout.criteria
    assert (
        criterion.failure_type,
        criterion.threshold_percent,
        criterion.min_executed,
        criterion.action,
    ) == (
        DEFAULT_CRITERION.failure_type,
        DEFAULT_CRITERION.threshold_percent,
        DEFAULT_CRITERION.min_executed,
        DEFAULT_CRITERION.action,
    )
    assert rollout.wave_timeout_seconds == policy.wave_timeout_seconds
    assert rollout.state == RolloutState.PENDING


async def test_planning_excludes_offline_revoked_unable_and_up_to_date_agents(
    services: InProcessConsole,
):
    token = await services.install_token()
    offline, _ = await services.enroll(AgentKey("offline"), token)
    services.clock.advance(services.settings.agent_stale_seconds + 1)
    eligible, _ = await services.enroll(AgentKey("eligible"), token)
    revoked, _ = await services.enroll(AgentKey("revoked"), token)
    await revoke_agent(services.rt, services.principal, revoked.agent_id)
    await services.enroll(AgentKey("read-only"), token, can_self_update=False)
    await services.enroll(AgentKey("current"), token, version="0.9.0")
    rollout = await create(services)
    assert {e.agent_name: e.reason for e in rollout.exclusions} == {
        "offline": "offline",
        "revoked": "revoked",
        "read-only": "cannot_self_update",
        "current": "already_at_target",
    }
    assert [t.agent_id for t in rollout.targets or []] == [eligible.agent_id]
    assert offline.agent_id not in {t.agent_id for t in rollout.targets or []}


async def test_the_flow_is_started_only_once_the_rollout_has_committed(
    services: InProcessConsole,
):
    await fleet(services, 2)
    services.effects.clear()
    rollout = await create(services)
    started = services.effects.of(FlowStarted)
    assert started == [
        FlowStarted(services.settings.rollout_deployment, {"rollout_id": rollout.id}, UUID(int=1))
    ]
    timeline = services.effects.timeline
    assert "commit" in timeline[: timeline.index(started[0])]
    again = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert again.flow_run_id == str(UUID(int=1))


# -- dispatch --------------------------------------------------------------------------------------


async def test_dispatching_a_wave_twice_sends_each_command_once(services: InProcessConsole):
    await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    services.effects.clear()
    first = await send(services, rollout.id, 0)
    again = await send(services, rollout.id, 0)
    assert (first.sent, first.already_sent) == (1, 0)
    assert (again.sent, again.already_sent) == (0, 1)
    (command,) = services.effects.commands
    assert command.kind is CommandKind.SELF_UPDATE
    assert command.command_id == command_id_for(rollout.id, command.agent_id)
    assert command.args["rollout_id"] == rollout.id and command.args["version"] == "0.9.0"


async def test_commands_are_sent_after_the_commit_that_marked_them_dispatched(
    services: InProcessConsole,
):
    await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    services.effects.clear()
    await send(services, rollout.id, 0)
    assert services.effects.timeline == ["commit", *services.effects.commands]
    assert len(services.effects.commands) == 1


async def test_nothing_is_sent_when_the_dispatch_transaction_fails(
    services: InProcessConsole, monkeypatch: pytest.MonkeyPatch
):
    await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    services.effects.clear()

    class DiskFull(Exception):
        pass

    class FailingSession(Session):
        def commit(self) -> None:
            raise DiskFull

    monkeypatch.setattr(unit_of_work, "Session", FailingSession)
    with pytest.raises(DiskFull):
        await send(services, rollout.id, 0)
    assert services.effects.effects == []
    monkeypatch.undo()
    wave = (await reads.get_rollout(services.rt, services.principal, rollout.id)).waves[0]
    assert wave.counts[TargetStatus.PENDING] == 1, "the failed unit marked nothing"
    retried = await send(services, rollout.id, 0)
    assert retried.sent == 1 and len(services.effects.commands) == 1


async def test_a_rollout_that_is_not_running_dispatches_nothing(services: InProcessConsole):
    await fleet(services, 3)
    rollout = await create(services)
    refused = await send(services, rollout.id, 0)
    assert refused.sent == 0 and refused.refused == "rollout is pending"
    assert services.effects.commands == []


# -- results and the threshold ---------------------------------------------------------------------


async def test_a_failing_canary_stalls_the_rollout_and_later_waves_get_nothing(
    services: InProcessConsole,
):
    await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    halted = await services.result(canary, CommandStatus.FAILED)
    assert halted == [rollout.id]
    stalled = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert stalled.state == RolloutState.STALLED
    assert stalled.threshold is not None and stalled.threshold["failures"] == 1
    services.effects.clear()
    later = await send(services, rollout.id, 1)
    assert later.sent == 0 and later.refused == "rollout is stalled"
    assert services.effects.commands == []


async def test_results_under_the_threshold_keep_it_running(services: InProcessConsole):
    await fleet(services, 20)
    rollout = await create(services, criteria=[CriterionSpec(threshold_percent=50, min_executed=2)])
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    assert await services.result(canary, CommandStatus.SUCCEEDED, new_version="0.9.0") == []
    assert await services.result(canary, CommandStatus.FAILED) == [], "a repeat is not counted"
    running = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert running.state == RolloutState.RUNNING
    assert running.counts[TargetStatus.SUCCEEDED] == 1


async def test_a_lost_command_times_out_on_the_clock_and_stalls(services: InProcessConsole):
    from console.services.rollouts.results import expire_overdue

    await fleet(services, 20)
    rollout = await create(services, wave_timeout_seconds=60)
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    services.clock.advance(59)
    assert await services.run(lambda uow: expire_overdue(uow.session), write=True) == []
    services.clock.advance(2)
    halted = await services.run(lambda uow: expire_overdue(uow.session), write=True)
    assert halted == [rollout.id]
    timed_out = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert timed_out.counts[TargetStatus.TIMED_OUT] == 1
    assert timed_out.state == RolloutState.STALLED


async def test_an_operator_resume_resumes_the_paused_flow_run_after_commit(
    services: InProcessConsole,
):
    await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    await services.result(canary, CommandStatus.FAILED)
    services.effects.clear()
    resumed = await lifecycle.transition(
        services.rt, services.principal, rollout.id, EventKind.RESUME
    )
    assert resumed.state == RolloutState.RUNNING
    # the reads before it (the driver check) commit too; the resume follows the decision's commit
    assert services.effects.timeline[-2:] == [
        "commit",
        FlowResumed(UUID(int=1), {"decision": "resume"}),
    ]
    assert services.effects.of(FlowResumed) == [FlowResumed(UUID(int=1), {"decision": "resume"})]
    assert isinstance(canary, CommandSent)


async def test_a_resume_prefect_refuses_is_a_409_not_a_200(services: InProcessConsole, monkeypatch):
    """What broke: the Console ignored Prefect's answer to the resume and answered 200."""
    from console.prefect_api import ResumeAnswer

    await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    await services.result(canary, CommandStatus.FAILED)

    async def refuse(self, flow_run_id, run_input):
        return ResumeAnswer(False, "Flow run is not paused")

    monkeypatch.setattr(lifecycle.PrefectApi, "resume", refuse)
    with pytest.raises(ConflictError) as refused:
        await lifecycle.transition(services.rt, services.principal, rollout.id, EventKind.RESUME)
    assert refused.value.reason == ErrorReason.RESUME_REFUSED
    assert "Flow run is not paused" in refused.value.message


# -- at-least-once results: idempotent, late ones win, silence only counts while listening ----


async def test_a_repeated_result_is_acknowledged_again_and_never_applied_twice(
    services: InProcessConsole,
):
    from contracts.vocabulary import ResultAckOutcome

    await fleet(services, 20)
    rollout = await create(services, criteria=[CriterionSpec(threshold_percent=50, min_executed=2)])
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    first = await services.deliver(canary, CommandStatus.SUCCEEDED, new_version="0.9.0")
    again = await services.deliver(canary, CommandStatus.FAILED)
    assert [a.outcome for a in first.acks] == [ResultAckOutcome.RECORDED]
    assert [a.outcome for a in again.acks] == [ResultAckOutcome.DUPLICATE]
    shown = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert shown.counts[TargetStatus.SUCCEEDED] == 1 and shown.counts[TargetStatus.FAILED] == 0


async def test_a_result_for_another_agents_or_an_unknown_command_is_refused(
    services: InProcessConsole,
):
    from contracts.vocabulary import ErrorReason, ResultAckOutcome

    ids = await fleet(services, 20)
    rollout = await create(services)
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    stranger = next(i for i in ids.values() if i != canary.agent_id)
    foreign = await services.deliver(canary, CommandStatus.FAILED, agent_id=stranger)
    (ack,) = foreign.acks
    assert (ack.outcome, ack.reason) == (ResultAckOutcome.REFUSED, ErrorReason.UNKNOWN_COMMAND)
    assert ack.message == f"no command {canary.command_id} was sent to agent {stranger}"
    unknown = CommandSent(canary.agent_id, "f" * 32, canary.kind, {})
    (ack,) = (await services.deliver(unknown, CommandStatus.SUCCEEDED)).acks
    assert ack.outcome is ResultAckOutcome.REFUSED
    ping = CommandSent(canary.agent_id, "p" * 32, CommandKind.PING, {})
    (ack,) = (await services.deliver(ping, CommandStatus.SUCCEEDED)).acks
    assert ack.outcome is ResultAckOutcome.NOT_TRACKED
    shown = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert shown.counts[TargetStatus.FAILED] == 0 and shown.state == RolloutState.RUNNING


async def test_silence_is_a_timeout_only_once_the_console_has_been_listening_for_the_grace(
    services: InProcessConsole,
):
    """Broke: results sent while the Console was down were lost, and the sweep turned their
    targets into timed_out the moment it came back; both rollouts aborted."""
    from console.core.clock import utcnow
    from console.services.rollouts.results import expire_overdue

    await fleet(services, 20)
    rollout = await create(services, wave_timeout_seconds=60)
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    services.clock.advance(120)
    back = utcnow()  # the Console (or its database) came back just now

    def sweep(uow):
        return expire_overdue(uow.session, listening_since=back, grace_seconds=30)

    assert await services.run(sweep, write=True) == []
    services.clock.advance(29)
    assert await services.run(sweep, write=True) == []
    services.clock.advance(2)
    assert await services.run(sweep, write=True) == [rollout.id]


async def test_a_late_result_replaces_timed_out_while_the_rollout_is_not_finished(
    services: InProcessConsole,
):
    from console.services.rollouts.results import expire_overdue
    from contracts.vocabulary import ResultAckOutcome

    await fleet(services, 20)
    rollout = await create(
        services,
        wave_timeout_seconds=60,
        criteria=[CriterionSpec(failure_type="timed_out", threshold_count=5)],
    )
    await start(services, rollout.id)
    await send(services, rollout.id, 0)
    (canary,) = services.effects.commands
    services.clock.advance(61)
    await services.run(lambda uow: expire_overdue(uow.session), write=True)
    late = await services.deliver(canary, CommandStatus.SUCCEEDED, new_version="0.9.0")
    assert [a.outcome for a in late.acks] == [ResultAckOutcome.RECORDED]
    shown = await reads.get_rollout(services.rt, services.principal, rollout.id)
    assert shown.counts[TargetStatus.TIMED_OUT] == 0
    assert shown.counts[TargetStatus.SUCCEEDED] == 1
