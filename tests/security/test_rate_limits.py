"""Rate limits on sign-in, enrollment and the agents' signed credential calls, on real
Consoles: per source address (failed attempts), per token and per agent id, answered 429
``{reason: rate_limited, message}`` with Retry-After, logged without secrets, counted in the
database (two replicas give one rate; a restart keeps it); the defaults let a fleet's
enrollment burst (1,000 agents behind one NAT with one install token in well under a minute)
through untouched."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import httpx

from contracts.enrollment import nats_credentials_message
from testkit.console import ConsoleProcess, Identity
from testkit.fixtures import ConsoleFactory
from testkit.signing_in import browser, sign_in


def audit_lines(console: ConsoleProcess) -> list[str]:
    return [line for line in console.log_path.read_text().splitlines() if "proxima.audit" in line]


def assert_rate_limited(r: httpx.Response) -> None:
    assert r.status_code == 429, r.text[:300]
    assert int(r.headers["Retry-After"]) >= 1


def test_sign_in_attempts_from_one_address_are_limited(console_factory: ConsoleFactory):
    console = console_factory(env={"PROXIMA_SIGN_IN_RATE_PER_SOURCE": "5/minute"})
    guesses = [f"pxa_guess{i:02d}" + "x" * 34 for i in range(5)]
    with browser(console.url) as attacker:
        for guess in guesses:
            r = sign_in(attacker, guess)
            assert r.status_code == 200 and "not valid" in r.text
        assert_rate_limited(sign_in(attacker, "pxa_guess99" + "x" * 34))
        # A valid token is never refused for others' failures from its address.
        assert sign_in(attacker, console.token).status_code == 303
    with browser(console.url, source="127.0.0.2") as someone_else:
        assert sign_in(someone_else, console.token).status_code == 303
    log = "\n".join(audit_lines(console))
    assert log.count("auth_failed") == 5 and "surface=web" in log
    assert "sign_in_refused" in log and "reason=rate_limited" in log
    for secret in (*guesses, console.token):
        assert secret not in console.log_path.read_text()


def test_sign_ins_with_one_token_are_limited_whatever_the_address(
    console_factory: ConsoleFactory,
):
    console = console_factory(env={"PROXIMA_SIGN_IN_RATE_PER_TOKEN": "3/minute"})
    for n in range(3):
        with browser(console.url, source=f"127.0.0.{10 + n}") as b:
            assert sign_in(b, console.token).status_code == 303
    with browser(console.url, source="127.0.0.20") as b:
        assert_rate_limited(sign_in(b, console.token))
        other = console.api_token(["clusters:read"])
        assert sign_in(b, other).status_code == 303, "another token is not held back"


def test_enrollments_with_one_install_token_are_limited_and_logged(
    console_factory: ConsoleFactory,
):
    console = console_factory(env={"PROXIMA_ENROLL_RATE_PER_TOKEN": "3/minute"})
    leaked = console.install_token()
    for i in range(3):
        assert (
            Identity(name=f"fake-{i}", machine_id=f"m-{i}").enroll(console, leaked).status_code
            == 201
        )
    r = Identity(name="fake-3", machine_id="m-3").enroll(console, leaked)
    assert_rate_limited(r)
    assert set(r.json()) == {"reason", "message"} and r.json()["reason"] == "rate_limited"
    fresh = console.install_token()
    assert Identity(name="real", machine_id="m-real").enroll(console, fresh).status_code == 201
    bad = Identity(name="bad", machine_id="m-bad").enroll(console, "pxi_" + "n" * 40)
    assert bad.status_code == 401
    lines = audit_lines(console)
    assert any("auth_failed" in line and "surface=enroll" in line for line in lines)
    assert sum("agent_enrolled" in line for line in lines) == 4
    text = console.log_path.read_text()
    for secret in (leaked, fresh, "pxi_" + "n" * 40):
        assert secret not in text


def test_enrollment_from_one_address_is_limited(console_factory: ConsoleFactory):
    """Attempts with install tokens that are not valid, per address; a valid token enrolls
    (its own rate is its token's)."""
    console = console_factory(env={"PROXIMA_ENROLL_RATE_PER_SOURCE": "2/minute"})
    token = console.install_token()
    for i in range(2):
        bad = Identity(name=f"n-{i}").enroll(console, f"pxi_made_up_{i}" + "x" * 30)
        assert bad.status_code == 401
    assert_rate_limited(Identity(name="n-2").enroll(console, "pxi_made_up_2" + "x" * 30))
    assert Identity(name="n-3").enroll(console, token).status_code == 201


def test_the_defaults_let_a_thousand_agents_behind_one_nat_enroll_in_a_minute(
    console_factory: ConsoleFactory,
):
    """One source address, one install token, 1,000 agents at once: no 429 (the defaults are
    3,000/minute per address and 2,000/minute per install token)."""
    console = console_factory(env={"PROXIMA_LOG_LEVEL": "warning"})
    token = console.install_token()
    bodies = [Identity(name=f"node-{i:04d}").enroll_body(token) for i in range(1000)]

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
            gate = asyncio.Semaphore(16)

            async def one(body: dict[str, object]) -> int:
                async with gate:
                    return (await client.post("/api/v1/agents/enroll", json=body)).status_code

            return await asyncio.gather(*(one(b) for b in bodies))

    codes = asyncio.run(asyncio.wait_for(burst(), timeout=60))
    assert codes.count(201) == 1000, {c: codes.count(c) for c in set(codes)}


def test_two_replicas_on_one_database_give_one_rate_and_a_restart_keeps_it(
    console_factory: ConsoleFactory, tmp_path: Path
):
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    limit = {"PROXIMA_ENROLL_RATE_PER_TOKEN": "4/minute"}
    a = console_factory("a", database_url=shared, env=limit)
    b = ConsoleProcess(tmp_path / "b", database_url=shared, env=limit)
    b.token = a.token  # the same Console data: no second bootstrap
    try:
        b.start()
        token = a.install_token()
        for n, replica in enumerate((a, b, a, b)):
            assert Identity(name=f"r-{n}").enroll(replica, token).status_code == 201
        assert_rate_limited(Identity(name="r-4").enroll(a, token))
        assert_rate_limited(Identity(name="r-5").enroll(b, token))
    finally:
        b.stop()
    a.stop()
    a.start()
    assert_rate_limited(Identity(name="r-6").enroll(a, token))


def test_signed_agent_calls_are_limited_per_agent_id(console_factory: ConsoleFactory):
    console = console_factory(env={"PROXIMA_AGENT_CREDENTIALS_RATE": "3/minute"})
    token = console.install_token()
    busy, calm = Identity(name="busy"), Identity(name="calm")
    ids = {i.name: i.enroll(console, token).json()["agent_id"] for i in (busy, calm)}

    def fresh_jwt(identity: Identity) -> httpx.Response:
        agent_id, signed_at = ids[identity.name], datetime.now(UTC)
        message = nats_credentials_message(
            agent_id=agent_id, public_key=identity.public_key, signed_at=signed_at
        )
        body = {
            "public_key": identity.public_key,
            "signed_at": signed_at.isoformat(),
            "signature": identity.sign(message),
        }
        return httpx.post(
            f"{console.url}/api/v1/agents/{agent_id}/nats-credentials", json=body, timeout=30
        )

    for _ in range(3):
        assert fresh_jwt(busy).status_code == 200
    r = fresh_jwt(busy)
    assert_rate_limited(r)
    assert r.json()["reason"] == "rate_limited"
    rotation = httpx.post(
        f"{console.url}/api/v1/agents/{ids['busy']}/credentials", json={}, timeout=30
    )
    assert rotation.status_code == 429, "the rotation proof shares the agent's allowance"
    assert fresh_jwt(calm).status_code == 200, "another agent is not held back"
    assert any("agent_call_refused" in line for line in audit_lines(console))
