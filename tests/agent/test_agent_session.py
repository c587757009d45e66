"""The agent against a real nats-server: heartbeats, metrics, commands once, reconnects."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from agent.runtime import AgentRuntime
from agent.state import StateStore
from contracts import subjects
from contracts.messages import CommandResult, CommandStatus, Heartbeat, HostMetrics
from contracts.vocabulary import AgentType
from testkit.agent_state import new_seed, public_of
from testkit.fake_console import answer
from testkit.nats import NatsServer
from testkit.runtime import Inbox, enrolled, ready, running, send_command, settings
from testkit.waiting import await_for


async def test_heartbeats_and_metrics_arrive_on_the_agents_subjects(
    tmp_path: Path, nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    client = await nats_server.connect()
    beats, metrics = Inbox(), Inbox()
    await client.subscribe(subjects.heartbeat(state.agent_id), cb=beats.handle)
    await client.subscribe(subjects.metrics(state.agent_id), cb=metrics.handle)
    runtime = AgentRuntime(settings(tmp_path))
    async with running(runtime):
        await await_for(lambda: len(beats.messages) >= 3, what="3 heartbeats")
        await await_for(lambda: metrics.messages, what="host metrics")
        assert ready(runtime)
    await client.close()

    beat = Heartbeat.model_validate(beats.messages[-1])
    assert beat.agent_id == state.agent_id
    assert beat.instance_id == runtime.instance_id
    assert beat.agent_type is AgentType.HOST
    assert beat.version == "0.8.0"
    assert beat.heartbeat_interval_seconds == 0.2
    assert beat.metrics_interval_seconds == 0.3
    assert beat.labels == {"zone": "a"}
    assert beat.uptime_seconds > 0
    sample = HostMetrics.model_validate(metrics.messages[0])
    assert sample.memory_total_bytes > 0
    assert "nats connected to" in caplog.text
    assert state.seed.get_secret_value() not in caplog.text
    assert "Permissions Violation" not in caplog.text


async def test_a_command_sent_twice_runs_once_and_both_get_the_result(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    client = await nats_server.connect()
    results = Inbox()
    await client.subscribe(subjects.command_result(state.agent_id), cb=results.handle)
    runtime = AgentRuntime(settings(tmp_path))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        await send_command(client, state.agent_id, "ping", "cmd-1")
        await send_command(client, state.agent_id, "ping", "cmd-1")
        await await_for(lambda: len(results.messages) >= 2, what="two results")
        await send_command(client, state.agent_id, "self_update", "cmd-2", version="0.9.0")
        await client.publish(subjects.commands(state.agent_id), b"{not json")
        await await_for(lambda: len(results.messages) >= 3, what="third result")
        assert runtime.dispatcher is not None
        assert runtime.dispatcher.executed == ["cmd-1", "cmd-2"]

    first, again, update = (CommandResult.model_validate(m) for m in results.messages)
    assert first == again
    assert first.status is CommandStatus.SUCCEEDED
    assert first.detail["pong"] is True
    assert first.detail["instance_id"] == runtime.instance_id
    assert update.status is CommandStatus.REJECTED
    # Started without a signing key (and not from a single-file build): refused, not tried.
    assert update.error == "no signing public key configured: refusing to install unsigned builds"

    # The ledger survives a restart: the same command id is still not run again.
    results.messages.clear()
    runtime2 = AgentRuntime(settings(tmp_path))
    async with running(runtime2):
        await await_for(lambda: ready(runtime2), what="agent ready again")
        await send_command(client, state.agent_id, "ping", "cmd-1")
        await await_for(lambda: results.messages, what="stored result")
        assert runtime2.dispatcher is not None
        assert runtime2.dispatcher.executed == []
    assert CommandResult.model_validate(results.messages[0]) == first
    await client.close()


async def test_reconnects_after_a_nats_restart_without_losing_identity(
    tmp_path: Path, nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    runtime = AgentRuntime(settings(tmp_path))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        nats_server.stop()
        await await_for(
            lambda: (runtime.readiness.connection_reason() or "").startswith("nats "),
            what="not ready",
        )
        nats_server.start()
        await await_for(lambda: ready(runtime), what="ready after restart")
        client = await nats_server.connect()
        beats = Inbox()
        await client.subscribe(subjects.heartbeat(state.agent_id), cb=beats.handle)
        await await_for(lambda: beats.messages, what="heartbeat after restart")
        await client.close()
    assert "nats disconnected from" in caplog.text
    assert "nats reconnected to" in caplog.text
    assert StateStore(tmp_path).read() == state


async def test_a_revoked_key_is_reported_and_retried_until_allowed_again(
    tmp_path: Path, nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    runtime = AgentRuntime(settings(tmp_path))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        nats_server.revoke(state.public_key)
        nats_server.reload()
        await await_for(
            lambda: (
                runtime.readiness.connection_reason()
                == "nats authorization refused: identity revoked, released or rotated"
            ),
            what="authorization refused",
        )
        session = runtime.session
        assert session is not None
        refused_from = session.attempts
        await await_for(lambda: session.attempts >= refused_from + 6, what="six refused attempts")
        nats_server.allow(state.public_key, state.agent_id)
        nats_server.reload()
        await await_for(lambda: ready(runtime), what="ready once allowed again")
    refused = [r for r in caplog.records if "nats authorization refused" in r.getMessage()]
    assert 0 < len(refused) <= 4, [r.getMessage() for r in refused]
    assert "Authorization Violation" in refused[0].getMessage()


async def test_pending_key_is_promoted_when_the_old_one_is_refused(
    tmp_path: Path, nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A rotation the Console applied while the agent died: the pending key must win."""
    caplog.set_level(logging.INFO)
    pending = new_seed()
    state = enrolled(nats_server, tmp_path, pending_seed=pending)
    nats_server.allow(public_of(pending), state.agent_id)  # only the new key is known
    nats_server.reload()
    runtime = AgentRuntime(settings(tmp_path))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="ready with the pending key")
    after = StateStore(tmp_path).read()
    assert after is not None
    assert after.seed.get_secret_value() == pending
    assert after.pending_seed is None
    assert after.agent_id == state.agent_id
    assert "credential rotation completed" in caplog.text


async def test_publishing_outside_the_agents_prefix_is_refused(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    runtime = AgentRuntime(settings(tmp_path))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        assert runtime.session is not None
        with pytest.raises(ValueError, match="only under"):
            await runtime.session.publish(subjects.heartbeat("someone-else"), b"{}")
        with pytest.raises(ValueError):
            await runtime.session.publish(subjects.agent_prefix(state.agent_id) + "x.y", b"{}")


async def test_the_enroll_then_connect_path_in_process(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    """State is persisted before the first NATS connect, and the new key is the one used."""
    from agent.httpclient import HttpRequest, HttpResponse

    seen: list[bool] = []

    def console(request: HttpRequest) -> HttpResponse:
        body = json.loads(request.body or b"{}")
        agent_id = "ag_" + uuid.uuid4().hex[:8]
        nats_server.allow(body["public_key"], agent_id)
        nats_server.reload()
        seen.append((tmp_path / "state.json").exists())
        return answer(
            201,
            {
                "agent_id": agent_id,
                "agent_type": body["agent_type"],
                "name": body["name"],
                "client_id": "cl",
                "environment_id": "env",
                "nats_url": nats_server.url,
                "rebound": False,
            },
        )

    (tmp_path / "token").write_text("itk_0123456789")
    runtime = AgentRuntime(
        settings(
            tmp_path,
            backend_url="http://console.test",
            install_token_file=tmp_path / "token",
            agent_name="node-7",
        ),
        backend_transport=console,
    )
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="enrolled and connected")
        assert runtime.store.current.name == "node-7"
    assert seen == [False]
    assert (tmp_path / "state.json").exists()


async def test_a_result_is_kept_and_resent_until_acknowledged_even_across_a_restart(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    """Broke: results were fire-and-forget (publish + flush to the server): one sent while the
    Console was not consuming was lost. Now it stays in the ledger until the Console's answer,
    which comes only after its commit."""
    from agent.ledger import JOURNAL_FILE, read_ledger

    def undelivered() -> list[str]:  # read only: the agent may be writing
        _, entries = read_ledger(tmp_path)
        return [e.command_id for e in entries if e.result is not None and not e.delivered]

    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    client = await nats_server.connect()
    fast = {"result_ack_timeout": 0.2, "result_retry_max": 0.2}
    silent = Inbox(ack=None)  # a Console that receives but never commits
    sub = await client.subscribe(subjects.command_result(state.agent_id), cb=silent.handle)
    runtime = AgentRuntime(settings(tmp_path, **fast))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        await send_command(client, state.agent_id, "ping", "cmd-1")
        await await_for(lambda: len(silent.messages) >= 3, what="the result sent again")
    assert not (tmp_path / JOURNAL_FILE).exists(), "the stop folded the journal"
    assert undelivered() == ["cmd-1"]
    await sub.unsubscribe()

    unavailable = Inbox(ack="unavailable")  # the database is down: keep it
    sub = await client.subscribe(subjects.command_result(state.agent_id), cb=unavailable.handle)
    runtime2 = AgentRuntime(settings(tmp_path, **fast))
    async with running(runtime2):
        await await_for(lambda: len(unavailable.messages) >= 2, what="sent after the restart")
        await sub.unsubscribe()
        recorded = Inbox()
        await client.subscribe(subjects.command_result(state.agent_id), cb=recorded.handle)
        await await_for(lambda: recorded.messages, what="the acknowledged delivery")
        await await_for(lambda: not undelivered(), what="the ledger settled")
        assert runtime2.dispatcher is not None and runtime2.dispatcher.executed == []
        count = len(recorded.messages)
        await send_command(client, state.agent_id, "ping", "cmd-2")
        await await_for(lambda: len(recorded.messages) > count, what="the next result")
    first = CommandResult.model_validate(silent.messages[0])
    assert {m["command_id"] for m in silent.messages + unavailable.messages} == {"cmd-1"}
    assert CommandResult.model_validate(recorded.messages[0]) == first
    assert [m["command_id"] for m in recorded.messages] == ["cmd-1", "cmd-2"]
    await client.close()


async def test_a_refused_result_is_not_sent_again(
    tmp_path: Path, nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    client = await nats_server.connect()
    refusing = Inbox(ack="refused")
    await client.subscribe(subjects.command_result(state.agent_id), cb=refusing.handle)
    runtime = AgentRuntime(settings(tmp_path, result_ack_timeout=0.2, result_retry_max=0.2))
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        await send_command(client, state.agent_id, "ping", "cmd-1")
        await await_for(lambda: refusing.messages, what="the result")
        await send_command(client, state.agent_id, "ping", "cmd-2")
        await await_for(lambda: len(refusing.messages) >= 2, what="the next result")
    assert [m["command_id"] for m in refusing.messages] == ["cmd-1", "cmd-2"]
    assert "the Console refused the result of command cmd-1" in caplog.text


async def test_another_agent_cannot_read_this_agents_acknowledgements(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    """The reply inbox is per agent: its subscribe permission names its own prefix only."""
    import nats.errors

    mine = enrolled(nats_server, tmp_path / "a")
    other = enrolled(nats_server, tmp_path / "b")
    for state in (mine, other):
        nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    errors: list[Exception] = []

    async def on_error(error: Exception) -> None:
        errors.append(error)

    spy = await nats_server.connect_as(other, error_cb=on_error)
    await spy.subscribe(f"{subjects.agent_inbox_prefix(mine.agent_id)}.>")
    await await_for(
        lambda: any("permissions violation" in str(e).lower() for e in errors),
        what="the server refusing the subscription",
    )
    assert isinstance(errors[0], nats.errors.Error)
    await spy.close()
