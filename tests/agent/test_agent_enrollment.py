"""Enrollment against a fake Console behind an injected transport, and a real closed port."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.backend import BackendClient
from agent.enrollment import Enroller, EnrollmentConfig, InstallToken
from agent.health import Readiness
from agent.httpclient import HttpRequest, HttpResponse, Transport
from agent.state import StateStore
from contracts.backoff import Backoff, RetryLog
from contracts.enrollment import EnrollRequest, enrollment_message_of, install_token_digest
from contracts.vocabulary import AgentType
from testkit.agent_state import verify
from testkit.fake_console import answer
from testkit.net import free_port
from testkit.waiting import await_for

BACKEND = "http://console.test"
TOKEN = "itk_0123456789abcdef"
FAST = Backoff(initial=0.001, maximum=0.004, jitter=0.2)


def enrolled_body(request: dict[str, Any], *, rebound: bool = False) -> dict[str, Any]:
    return {
        "agent_id": "ag_fresh",
        "agent_type": request["agent_type"],
        "name": request["name"],
        "client_id": "cl_1",
        "environment_id": "env_1",
        "nats_url": "nats://127.0.0.1:4222",
        "rebound": rebound,
    }


def conflict(reason: str = "name_in_use") -> HttpResponse:
    return answer(
        409, {"reason": reason, "message": "node-1 is enrolled already", "agent_id": "ag_old"}
    )


class FakeConsole:
    """Answers enrollments from a script; records every request body."""

    def __init__(self, *answers: Callable[[dict[str, Any]], HttpResponse]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: HttpRequest) -> HttpResponse:
        assert request.path == "/api/v1/agents/enroll"
        body = json.loads(request.body or b"{}")
        self.requests.append(body)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return answer(body)

    def transport(self) -> Transport:
        return self


def config(tmp_path: Path, **overrides: Any) -> EnrollmentConfig:
    values: dict[str, Any] = {
        "agent_type": AgentType.HOST,
        "name": "node-1",
        "backend_url": BACKEND,
        "token": InstallToken(file=tmp_path / "token"),
        "version": "0.8.0",
        "instance_id": "inst-1",
        "can_self_update": True,
        "host_root": tmp_path / "host",
        "labels": {"zone": "a"},
    }
    values.update(overrides)
    (tmp_path / "token").write_text(TOKEN + "\n")
    return EnrollmentConfig(**values)


def enroller(
    tmp_path: Path, console: FakeConsole | Transport, **kw: Any
) -> tuple[Enroller, Readiness, StateStore]:
    transport = console.transport() if isinstance(console, FakeConsole) else console
    readiness = Readiness()
    store = StateStore(tmp_path)
    cfg = config(tmp_path, **kw.pop("config", {}))
    backend = BackendClient(cfg.backend_url, transport=transport)
    return Enroller(cfg, backend, store, readiness, backoff=FAST, **kw), readiness, store


async def test_fresh_enrollment_persists_state_and_logs_enrolled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    console = FakeConsole(lambda body: answer(201, enrolled_body(body)))
    machine = tmp_path / "host/etc"
    machine.mkdir(parents=True)
    (machine / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    agent, readiness, store = enroller(tmp_path, console)

    state = await agent.enroll()

    assert state.agent_id == "ag_fresh"
    assert readiness.enrolled
    on_disk = StateStore(tmp_path).load(expected_type=AgentType.HOST)
    assert on_disk == state
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    request = EnrollRequest.model_validate(console.requests[0])
    assert request.install_token == TOKEN
    assert request.signals.machine_id == "0123456789abcdef0123456789abcdef"
    assert request.labels == {"zone": "a"}
    assert request.public_key == state.public_key
    message = enrollment_message_of(request)
    assert verify(request.public_key, message, request.signature)
    assert message.startswith(b"proxima-enroll-v2\n")
    assert install_token_digest(TOKEN).encode() in message
    assert TOKEN.encode() not in message
    enrolled = [r.getMessage() for r in caplog.records if "enrolled" in r.getMessage()]
    assert enrolled == ["enrolled as agent ag_fresh (host 'node-1') in environment env_1"]
    assert state.seed.get_secret_value() not in caplog.text
    assert TOKEN not in caplog.text


async def test_rebound_enrollment_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    console = FakeConsole(lambda body: answer(200, enrolled_body(body, rebound=True)))
    agent, _, _ = enroller(tmp_path, console)
    await agent.enroll()
    assert "enrolled: re-bound to existing agent ag_fresh" in caplog.text


async def test_409_keeps_retrying_not_ready_without_flooding_then_enrolls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The chart page's hostDataDir story: a 409 must not look healthy, nor spam the log."""
    caplog.set_level(logging.INFO)
    release = asyncio.Event()
    seen_reasons: list[str | None] = []
    readiness_holder: list[Readiness] = []

    def reply(body: dict[str, Any]) -> HttpResponse:
        seen_reasons.append(readiness_holder[0].connection_reason())
        if release.is_set():
            return answer(201, enrolled_body(body))
        return conflict()

    console = FakeConsole(reply)
    agent, readiness, store = enroller(tmp_path, console)
    readiness_holder.append(readiness)
    task = asyncio.create_task(agent.enroll())
    await await_for(lambda: len(console.requests) >= 40, what="40 enrollment attempts")
    assert readiness.connection_reason() == "not enrolled: 409 name_in_use"
    assert not store.exists()
    release.set()
    state = await asyncio.wait_for(task, 10)

    assert readiness.connection_reason() != "not enrolled: 409 name_in_use"
    assert state.agent_id == "ag_fresh"
    # Same key pair on every attempt: the key proves one process, not one attempt.
    assert len({r["public_key"] for r in console.requests}) == 1
    refusals = [r for r in caplog.records if "409 name_in_use" in r.getMessage()]
    # Backoff of 1, 2, 4 ms then capped: one line per step, not one per attempt.
    assert 0 < len(refusals) <= 4, [r.getMessage() for r in refusals]
    assert "agent ag_old" in refusals[0].getMessage()
    assert "retrying with backoff" in refusals[0].getMessage()


async def test_bad_token_is_retried_and_a_fixed_token_file_is_picked_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    def reply(body: dict[str, Any]) -> HttpResponse:
        if body["install_token"] != "itk_fixed_token_value":
            return answer(401, {"reason": "invalid_token", "message": "unknown install token"})
        return answer(201, enrolled_body(body))

    console = FakeConsole(reply)
    agent, readiness, _ = enroller(tmp_path, console)
    task = asyncio.create_task(agent.enroll())
    await await_for(lambda: len(console.requests) >= 3, what="retries")
    assert readiness.connection_reason() == "not enrolled: 401 invalid_token"
    assert "401 invalid_token: unknown install token" in caplog.text
    assert "check the install token" in caplog.text
    (tmp_path / "token").write_text("itk_fixed_token_value\n")
    state = await asyncio.wait_for(task, 10)
    assert state.agent_id == "ag_fresh"
    assert TOKEN not in caplog.text


async def test_connection_refused_names_the_url_and_what_to_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = f"http://127.0.0.1:{free_port()}"
    readiness = Readiness()
    cfg = config(tmp_path, backend_url=url)
    agent = Enroller(
        cfg, BackendClient(url), StateStore(tmp_path), readiness, backoff=FAST, retry_log=RetryLog()
    )
    task = asyncio.create_task(agent.enroll())
    try:
        await await_for(lambda: agent.attempts >= 5, what="5 attempts")
    finally:
        task.cancel()
    assert (
        f"connection refused to backend {url}: check backendUrl and cluster egress rules"
        in caplog.text
    )
    assert readiness.connection_reason() == f"not enrolled: connection refused to backend {url}"
    assert caplog.text.count("connection refused to backend") <= 4


async def test_garbled_answer_and_server_errors_are_retried(tmp_path: Path) -> None:
    answers = iter(
        [
            answer(500, text="oops"),
            answer(201, {"unexpected": True}),
            answer(503, {"reason": "maintenance", "message": "back soon"}),
        ]
    )

    def reply(body: dict[str, Any]) -> HttpResponse:
        return next(answers, None) or answer(201, enrolled_body(body))

    console = FakeConsole(reply)
    agent, _, _ = enroller(tmp_path, console)
    state = await asyncio.wait_for(agent.enroll(), 10)
    assert state.agent_id == "ag_fresh"
    assert len(console.requests) == 4


async def test_retry_log_speaks_on_change_on_growth_and_then_rarely() -> None:
    now = [0.0]
    log = RetryLog(repeat_every=600, clock=lambda: now[0])
    assert log.should_log("409 name_in_use", 1)
    assert not log.should_log("409 name_in_use", 1)
    assert log.should_log("409 name_in_use", 2)
    assert log.should_log("401 invalid_token", 2)
    assert not log.should_log("401 invalid_token", 2)
    now[0] = 601
    assert log.should_log("401 invalid_token", 2)


def test_backoff_grows_caps_and_jitters_down() -> None:
    b = Backoff(initial=1, maximum=60, jitter=0.2)
    assert [b.step(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert b.delay(3, rng=lambda: 1.0) == pytest.approx(6.4)
    assert b.delay(3, rng=lambda: 0.0) == 8
    assert Backoff(initial=1, maximum=0.5).step(0) == 0.5


class FullDiskStore(StateStore):
    """``state.json`` cannot be written (ENOSPC) the first ``failures`` times."""

    def __init__(self, data_dir: Path, failures: int) -> None:
        super().__init__(data_dir)
        self.failures = failures

    def create(self, state: Any) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError(28, "No space left on device")
        super().create(state)


async def test_a_state_file_that_cannot_be_written_retries_with_the_same_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Broke: an agent enrolling on a full disk exited 1 and its next start proved a new key
    under the same name, which the Console refused (409) for the whole quiet window. The key is
    kept on disk before enrolling; a retry (or a restart) proves the same key."""
    console = FakeConsole(lambda body: answer(201, enrolled_body(body)))
    cfg = config(tmp_path)
    readiness = Readiness()
    full = FullDiskStore(tmp_path, failures=2)
    backend = BackendClient(cfg.backend_url, transport=console.transport())
    state = await Enroller(cfg, backend, full, readiness, backoff=FAST).enroll()
    keys = {r["public_key"] for r in console.requests}
    assert len(console.requests) == 3 and keys == {state.public_key}
    assert stat.S_IMODE(store_mode(tmp_path)) == 0o600
    assert not (tmp_path / "enrollment.key").exists(), "the key lives in state.json now"
    assert "state file not writable" in caplog.text or "cannot write state file" in caplog.text


def store_mode(tmp_path: Path) -> int:
    return (tmp_path / "state.json").stat().st_mode


async def test_a_restart_after_a_failed_state_write_proves_the_same_key(tmp_path: Path) -> None:
    console = FakeConsole(lambda body: answer(201, enrolled_body(body)))
    cfg = config(tmp_path)
    backend = BackendClient(cfg.backend_url, transport=console.transport())
    first = Enroller(cfg, backend, FullDiskStore(tmp_path, failures=99), Readiness(), backoff=FAST)
    task = asyncio.create_task(first.enroll())
    await await_for(lambda: len(console.requests) >= 2, what="two attempts")
    task.cancel()  # the process dies
    key_file = tmp_path / "enrollment.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    second = Enroller(cfg, backend, StateStore(tmp_path), Readiness(), backoff=FAST)
    state = await second.enroll()
    assert {r["public_key"] for r in console.requests} == {state.public_key}


async def test_nothing_is_sent_while_the_key_cannot_be_kept(tmp_path: Path) -> None:
    console = FakeConsole(lambda body: answer(201, enrolled_body(body)))
    cfg = config(tmp_path)
    backend = BackendClient(cfg.backend_url, transport=console.transport())
    readiness = Readiness()
    blocker = tmp_path / "enrollment.key"
    blocker.mkdir()  # the key cannot be written there (works for root too, unlike a chmod)
    task = asyncio.create_task(
        Enroller(cfg, backend, StateStore(tmp_path), readiness, backoff=FAST).enroll()
    )
    await await_for(
        lambda: "data directory not writable" in (readiness.connection_reason() or ""),
        what="the problem",
    )
    assert console.requests == []
    blocker.rmdir()
    state = await asyncio.wait_for(task, 10)
    assert [r["public_key"] for r in console.requests] == [state.public_key]
