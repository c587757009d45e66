"""Nobody locks out a credential they do not hold. Knowing only a token's public 10-character
prefix (token lists, the web UI, the audit log show it), 32 made-up sign-ins made the real
admin token answer 429, and 2,100 bogus enrollments made the real install token answer 429;
any client could set ``X-Forwarded-For`` to spread its attempts over made-up sources (and write
any ``source`` into the audit log).

Against real Consoles: a token's counter is keyed by a digest of the whole token, a source's
counts only attempts with credentials that are not valid and never refuses a valid one, and
``X-Forwarded-For`` is believed only from ``PROXIMA_TRUSTED_PROXIES``."""

from __future__ import annotations

import asyncio
import secrets

import httpx

from console.web.sessions import SIGN_IN_COOKIE
from testkit.console import ConsoleProcess, Identity
from testkit.fixtures import ConsoleFactory
from testkit.signing_in import CSRF, browser, sign_in


def audit_lines(console: ConsoleProcess) -> list[str]:
    return [line for line in console.log_path.read_text().splitlines() if "proxima.audit" in line]


def lookalike(token: str) -> str:
    """A made-up token with ``token``'s public prefix (what the attacker knows)."""
    return token[:10] + secrets.token_urlsafe(len(token) - 10)[: len(token) - 10]


def test_guesses_with_the_admin_tokens_prefix_never_lock_the_admin_out(
    console_factory: ConsoleFactory,
):
    """32 sign-ins with made-up tokens sharing the admin token's prefix (from 4 addresses,
    under every per-source limit) made the admin's own sign-in answer 429."""
    console = console_factory()
    for n in range(32):
        with browser(console.url, source=f"127.0.1.{n % 4 + 1}") as attacker:
            assert sign_in(attacker, lookalike(console.token)).status_code == 200
    with browser(console.url, source="127.0.2.1") as admin:
        answer = sign_in(admin, console.token)
    assert answer.status_code == 303, answer.text[:300]
    assert sum("auth_failed" in line for line in audit_lines(console)) == 32


def test_bogus_enrollments_never_spend_a_real_install_tokens_rate(
    console_factory: ConsoleFactory,
):
    """A flood of enrollments with made-up install tokens sharing a real token's prefix (2,100
    against the default 2,000/minute; here 60 against 50/minute) made the real token's
    enrollments answer 429."""
    console = console_factory(
        env={"PROXIMA_ENROLL_RATE_PER_TOKEN": "50/minute", "PROXIMA_LOG_LEVEL": "warning"}
    )
    real = console.install_token()
    bodies = [Identity(name=f"bogus-{i}").enroll_body(lookalike(real)) for i in range(60)]

    async def flood() -> list[int]:
        async with httpx.AsyncClient(base_url=console.url, timeout=60) as client:
            gate = asyncio.Semaphore(8)

            async def one(body: dict[str, object]) -> int:
                async with gate:
                    return (await client.post("/api/v1/agents/enroll", json=body)).status_code

            return await asyncio.gather(*(one(b) for b in bodies))

    codes = asyncio.run(asyncio.wait_for(flood(), timeout=120))
    assert set(codes) == {401}, {c: codes.count(c) for c in set(codes)}
    answer = Identity(name="real-agent").enroll(console, real)
    assert answer.status_code == 201, answer.text[:300]


def test_a_valid_token_is_never_refused_for_failures_from_its_address(
    console_factory: ConsoleFactory,
):
    """Others' failed attempts from one address (a NAT, an office) past the per-source limit
    made a valid token presented from that address answer 429, at sign-in and at enrollment."""
    console = console_factory(
        env={
            "PROXIMA_SIGN_IN_RATE_PER_SOURCE": "3/minute",
            "PROXIMA_ENROLL_RATE_PER_SOURCE": "3/minute",
        }
    )
    with browser(console.url, source="127.0.3.1") as nat:
        for _ in range(3):
            assert sign_in(nat, lookalike(console.token)).status_code == 200
        assert sign_in(nat, lookalike(console.token)).status_code == 429  # guessing stops
        assert sign_in(nat, console.token).status_code == 303
    real = console.install_token()
    for i in range(4):
        Identity(name=f"bad-{i}").enroll(console, lookalike(real))
    assert Identity(name="bad-9").enroll(console, lookalike(real)).status_code == 429
    assert Identity(name="good").enroll(console, real).status_code == 201


def _sign_in_from(url: str, token: str, forwarded_for: str) -> httpx.Response:
    with browser(url) as b:
        page = b.get("/sign-in", headers={"X-Forwarded-For": forwarded_for})
        nonce = CSRF.search(page.text)
        assert nonce
        b.cookies.set(SIGN_IN_COOKIE, page.cookies.get(SIGN_IN_COOKIE) or "", path="/sign-in")
        return b.post(
            "/sign-in",
            data={"token": token, "csrf_token": nonce[1], "next": ""},
            headers={"X-Forwarded-For": forwarded_for},
        )


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(console_factory: ConsoleFactory):
    """Any client set ``X-Forwarded-For``: each guess came from a made-up source (no
    per-source limit held) and the audit log recorded the made-up source."""
    console = console_factory(env={"PROXIMA_SIGN_IN_RATE_PER_SOURCE": "3/minute"})
    codes = [
        _sign_in_from(console.url, lookalike(console.token), f"203.0.113.{n}").status_code
        for n in range(4)
    ]
    assert codes == [200, 200, 200, 429]
    failed = [line for line in audit_lines(console) if "auth_failed" in line]
    assert failed and all("source=127.0.0.1" in line for line in failed)
    assert not any("203.0.113." in line for line in audit_lines(console))


def test_x_forwarded_for_from_a_trusted_proxy_names_the_client(console_factory: ConsoleFactory):
    """Behind a proxy listed in ``PROXIMA_TRUSTED_PROXIES`` each client has its own source."""
    console = console_factory(
        env={"PROXIMA_SIGN_IN_RATE_PER_SOURCE": "3/minute", "PROXIMA_TRUSTED_PROXIES": "127.0.0.1"}
    )
    codes = [
        _sign_in_from(console.url, lookalike(console.token), f"203.0.113.{n}").status_code
        for n in range(4)
    ]
    assert codes == [200, 200, 200, 200]
    assert any("source=203.0.113.3" in line for line in audit_lines(console))
