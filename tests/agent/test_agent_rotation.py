"""rotate_credentials: the new key is proven by the old one, persisted first, then used."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent.httpclient import HttpRequest, HttpResponse
from agent.runtime import AgentRuntime
from agent.state import AgentState, StateStore
from contracts import subjects
from contracts.enrollment import RotationProof, rotation_message
from contracts.messages import CommandResult, CommandStatus
from testkit.agent_state import verify
from testkit.fake_console import answer
from testkit.nats import NatsServer
from testkit.runtime import Inbox, enrolled, ready, running, send_command, settings
from testkit.waiting import await_for

NONCE = "nonce-0123456789abcdef"


class RotatingConsole:
    """Checks both signatures, then swaps the key in NATS (cutting the old connection)."""

    def __init__(
        self, nats: NatsServer, state: AgentState, status: int = 200, *, cut_old: bool = True
    ) -> None:
        self.nats = nats
        self.cut_old = cut_old
        self.state = state
        self.status = status
        self.proofs: list[RotationProof] = []
        self.pending_on_disk: list[bool] = []
        self.data_dir: Path | None = None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        assert request.path == f"/api/v1/agents/{self.state.agent_id}/credentials"
        proof = RotationProof.model_validate(json.loads(request.body or b"{}"))
        self.proofs.append(proof)
        if self.data_dir is not None:
            on_disk = StateStore(self.data_dir).read()
            assert on_disk is not None
            self.pending_on_disk.append(on_disk.pending_seed is not None)
        message = rotation_message(
            agent_id=self.state.agent_id, nonce=proof.nonce, new_public_key=proof.new_public_key
        )
        if not verify(self.state.public_key, message, proof.old_signature):
            return answer(403, {"reason": "bad_old_signature", "message": "no"})
        if not verify(proof.new_public_key, message, proof.new_signature):
            return answer(403, {"reason": "bad_new_signature", "message": "no"})
        if self.status != 200:
            return answer(self.status, {"reason": "refused", "message": "rotation refused"})
        if self.cut_old:
            self.nats.revoke(self.state.public_key)
        self.nats.allow(proof.new_public_key, self.state.agent_id)
        self.nats.reload()
        return answer(200, {"agent_id": self.state.agent_id})


async def rotate(
    tmp_path: Path, nats_server: NatsServer, status: int, *, cut_old: bool = True
) -> tuple[AgentState, AgentRuntime, RotatingConsole, list[dict[str, Any]], list[dict[str, Any]]]:
    state = enrolled(nats_server, tmp_path, backend_url="http://console.test")
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    console = RotatingConsole(nats_server, state, status, cut_old=cut_old)
    console.data_dir = tmp_path
    client = await nats_server.connect()
    results, beats = Inbox(), Inbox()
    await client.subscribe(subjects.command_result(state.agent_id), cb=results.handle)
    await client.subscribe(subjects.heartbeat(state.agent_id), cb=beats.handle)
    runtime = AgentRuntime(settings(tmp_path), backend_transport=console)
    async with running(runtime):
        await await_for(lambda: ready(runtime), what="agent ready")
        await send_command(client, state.agent_id, "rotate_credentials", "rot-1", nonce=NONCE)
        await await_for(lambda: results.messages, what="rotation result")
        if status == 200:
            await await_for(
                lambda: (
                    runtime.session is not None
                    and runtime.session.connected_key == console.proofs[0].new_public_key
                    and ready(runtime)
                ),
                what="ready with the new key",
            )
        beats.messages.clear()
        await await_for(lambda: beats.messages, what="heartbeat after the rotation")
    await client.close()
    return state, runtime, console, results.messages, beats.messages


@pytest.mark.parametrize("cut_old", [True, False], ids=["console-cuts-old-key", "old-key-kept"])
async def test_rotation_swaps_the_key_and_reconnects_with_it(
    tmp_path: Path, nats_server: NatsServer, caplog: pytest.LogCaptureFixture, cut_old: bool
) -> None:
    caplog.set_level(logging.INFO)
    state, _, console, results, _ = await rotate(tmp_path, nats_server, 200, cut_old=cut_old)

    result = CommandResult.model_validate(results[0])
    assert result.status is CommandStatus.SUCCEEDED, result
    new_public = console.proofs[0].new_public_key
    assert result.detail == {"public_key": new_public}
    assert console.pending_on_disk == [True], "the new key must be on disk before the POST"
    after = StateStore(tmp_path).read()
    assert after is not None
    assert after.public_key == new_public != state.public_key
    assert after.pending_seed is None
    assert after.rotated_at is not None
    assert after.agent_id == state.agent_id
    assert (
        f"nats reconnected to {nats_server.url} as agent {state.agent_id} (key {new_public})"
        in (caplog.text)
    )
    if not cut_old:
        # Nobody cut the old connection: the agent must move to the new key by itself.
        assert "credentials rotated" in caplog.text and "nats reconnecting to" in caplog.text
    for secret in (state.seed.get_secret_value(), after.seed.get_secret_value()):
        assert secret not in caplog.text


async def test_a_refused_rotation_keeps_the_old_key_and_drops_the_pending_one(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    state, _, _, results, beats = await rotate(tmp_path, nats_server, 403)
    result = CommandResult.model_validate(results[0])
    assert result.status is CommandStatus.FAILED
    assert "403 refused" in (result.error or "")
    assert results[0]["failure_kind"] == "rotation_failed"
    after = StateStore(tmp_path).read()
    assert after is not None
    assert after.seed == state.seed
    assert after.pending_seed is None
    assert beats


async def test_an_unknown_outcome_keeps_the_pending_key_for_later(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    state, _, console, results, _ = await rotate(tmp_path, nats_server, 502)
    result = CommandResult.model_validate(results[0])
    assert result.status is CommandStatus.FAILED
    assert (result.error or "").startswith("rotation outcome unknown")
    assert results[0]["failure_kind"] == "rotation_unconfirmed"
    after = StateStore(tmp_path).read()
    assert after is not None
    assert after.seed == state.seed
    assert after.pending_seed is not None
    assert after.model_copy(update={"seed": after.pending_seed}).public_key == (
        console.proofs[0].new_public_key
    )


async def test_a_rotation_without_a_nonce_is_rejected(
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
        await send_command(client, state.agent_id, "rotate_credentials", "rot-x")
        await await_for(lambda: results.messages, what="rejection")
    await client.close()
    result = CommandResult.model_validate(results.messages[0])
    assert result.status is CommandStatus.REJECTED
    assert "nonce" in (result.error or "")
    assert results.messages[0]["failure_kind"] == "bad_arguments"
