"""The agent honours ``Retry-After`` on 429 and 503: with a fake Console behind an injected
transport (the waits, their cap and jitter, every call of the backend client), and against a
real Console configured with a tiny enrollment rate."""

from __future__ import annotations

import asyncio
import json
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import nkeys
import pytest

from agent.backend import BackendClient
from agent.enrollment import Enroller, EnrollmentConfig, InstallToken
from agent.errors import BackendAnswerError
from agent.health import Readiness
from agent.httpclient import HttpRequest, HttpResponse, UrllibTransport, retry_after_seconds
from agent.state import StateStore
from contracts.backoff import RETRY_AFTER_CAP, Backoff, honour_retry_after
from contracts.vocabulary import AgentType
from testkit.console import Identity
from testkit.fixtures import ConsoleFactory

FAST = Backoff(initial=0.001, maximum=0.004, jitter=0.2)


class Sleeps:
    """Records the waits asked for; waits ``real`` of each (0: not at all)."""

    def __init__(self, real: float = 0.0) -> None:
        self.waits: list[float] = []
        self.real = real

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.real:
            await asyncio.sleep(seconds * self.real)


def busy(status: int, retry_after: str) -> HttpResponse:
    body = {"reason": "rate_limited", "message": "slow down"}
    return HttpResponse(status, json.dumps(body).encode(), {"retry-after": retry_after})


def enrolled(request: HttpRequest) -> HttpResponse:
    body = json.loads(request.body or b"{}")
    answer = {
        "agent_id": "ag_1",
        "agent_type": body["agent_type"],
        "name": body["name"],
        "client_id": "cl_1",
        "environment_id": "env_1",
        "nats_url": "nats://127.0.0.1:4222",
        "nats_jwt": "x",
        "rebound": False,
    }
    return HttpResponse(201, json.dumps(answer).encode())


class Scripted:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, request: HttpRequest) -> HttpResponse:
        self.calls += 1
        answer = self.answers.pop(0)
        return answer(request) if callable(answer) else answer


def make_enroller(
    tmp_path: Path, backend: BackendClient, sleep: Sleeps, backend_url: str = "http://c.test"
) -> Enroller:
    (tmp_path / "token").write_text("pxi_" + "t" * 40)
    cfg = EnrollmentConfig(
        agent_type=AgentType.HOST,
        name="node-1",
        backend_url=backend_url,
        token=InstallToken(file=tmp_path / "token"),
        version="0.8.0",
        instance_id="inst-1",
        can_self_update=False,
        host_root=tmp_path / "host",
    )
    return Enroller(cfg, backend, StateStore(tmp_path), Readiness(), backoff=FAST, sleep=sleep)


def test_retry_after_is_read_as_seconds_or_an_http_date_on_429_and_503_only():
    assert retry_after_seconds(busy(429, "7")) == 7.0
    assert retry_after_seconds(busy(503, "0")) == 0.0
    at = time.time()
    dated = retry_after_seconds(busy(503, formatdate(at + 30, usegmt=True)), now=at)
    assert dated is not None and 28 <= dated <= 31
    assert retry_after_seconds(busy(429, "soon")) is None
    assert retry_after_seconds(HttpResponse(500, b"", {"retry-after": "5"})) is None


def test_the_wait_is_capped_jittered_upwards_and_never_below_the_own_backoff():
    assert honour_retry_after(None, 1.5) == 1.5
    assert honour_retry_after(10, 1.0, rng=lambda: 0.0) == 10
    assert honour_retry_after(10, 1.0, rng=lambda: 1.0) == pytest.approx(12)
    assert honour_retry_after(86400, 1.0, rng=lambda: 0.0) == RETRY_AFTER_CAP
    assert honour_retry_after(2, 50.0) == 50.0


async def test_enrollment_waits_as_long_as_the_console_asks(tmp_path: Path):
    sleep = Sleeps()
    transport = Scripted(busy(429, "7"), busy(503, "86400"), enrolled)
    backend = BackendClient("http://c.test", transport=transport, busy_retries=0)
    agent = make_enroller(tmp_path, backend, sleep)
    state = await agent.enroll()
    assert state.agent_id == "ag_1" and agent.attempts == 3
    first, second = sleep.waits
    assert 7 <= first <= 7 * 1.2, "Retry-After, jittered upwards, instead of 1 ms of backoff"
    assert RETRY_AFTER_CAP <= second <= RETRY_AFTER_CAP * 1.2, "a day is capped"


async def test_every_backend_call_asks_again_after_the_wait_a_busy_console_names(
    tmp_path: Path,
):
    sleep = Sleeps()
    seed = nkeys.encode_seed(b"s" * 32, nkeys.PREFIX_BYTE_USER).decode()
    jwt_answer = HttpResponse(
        200,
        json.dumps(
            {"agent_id": "ag_1", "public_key": "U" * 56, "nats_url": "nats://x", "nats_jwt": "j"}
        ).encode(),
    )
    transport = Scripted(busy(503, "3"), busy(429, "1000"), jwt_answer)
    backend = BackendClient("http://c.test", transport=transport, sleep=sleep, retry_after_cap=30)
    await backend.nats_credentials("ag_1", seed)
    assert transport.calls == 3
    assert 3 <= sleep.waits[0] <= 3.6 and 30 <= sleep.waits[1] <= 36
    # Past its retries the error carries the wait, for the caller's own loop.
    still_busy = Scripted(busy(429, "5"), busy(429, "5"))
    backend = BackendClient("http://c.test", transport=still_busy, sleep=sleep, busy_retries=1)
    with pytest.raises(BackendAnswerError) as refused:
        await backend.nats_credentials("ag_1", seed)
    assert refused.value.status == 429 and refused.value.retry_after == 5.0


async def test_against_a_console_with_a_tiny_enrollment_rate(
    console_factory: ConsoleFactory, tmp_path: Path
):
    """One enrollment per 3 s per install token: the agent, turned away with 429, waits the
    Retry-After it is given (not its 1 ms backoff) and then enrolls."""
    console = console_factory(env={"PROXIMA_ENROLL_RATE_PER_TOKEN": "1/3 seconds"})
    token = console.install_token()
    assert Identity(name="first").enroll(console, token).status_code == 201
    sleep = Sleeps(real=1.0)
    requests: list[float] = []
    real = UrllibTransport()

    def recording(request: HttpRequest) -> HttpResponse:
        requests.append(time.monotonic())
        return real(request)

    backend = BackendClient(console.url, transport=recording, busy_retries=0)
    (tmp_path / "agent").mkdir()
    agent = make_enroller(tmp_path / "agent", backend, sleep, backend_url=console.url)
    (tmp_path / "agent" / "token").write_text(token)
    started = time.monotonic()
    state = await asyncio.wait_for(agent.enroll(), timeout=30)
    assert state.agent_id
    assert sleep.waits and all(w >= 1 for w in sleep.waits), sleep.waits
    assert agent.attempts <= 3, f"{agent.attempts} attempts: the agent did not wait as told"
    assert time.monotonic() - started >= 1
