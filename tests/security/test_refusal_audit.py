"""Refusals that name an attacker are audit records: a refused scope escalation (minting a
child above its parent, revoking a stronger token) and a cross-tenant 403 (another client's or
environment's record) left nothing in the audit log. Against a real Console, through the API
and the web pages; the lines name the token that tried, never a secret."""

from __future__ import annotations

from typing import Any

from testkit.console import ConsoleProcess
from testkit.fixtures import ConsoleFactory
from testkit.rollouts import create_rollout
from testkit.signing_in import browser, signed_in


def audit_lines(console: ConsoleProcess, event: str) -> list[str]:
    text = console.log_path.read_text().splitlines()
    return [line for line in text if "proxima.audit" in line and f" {event} " in f"{line} "]


def token_id(console: ConsoleProcess, token: str) -> str:
    with console.client(token) as c:
        return str(c.get("/api/v1/whoami").json()["token_id"])


def mint(console: ConsoleProcess, by: str, scopes: list[str]) -> dict[str, Any]:
    with console.client(by) as c:
        r = c.post("/api/v1/api-tokens", json={"name": "delegate", "scopes": scopes})
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_a_refused_scope_escalation_is_audited(console_factory: ConsoleFactory):
    console = console_factory()
    delegate = mint(console, console.token, ["tokens:write", "tokens:read", "agents:read"])
    with console.client(delegate["token"]) as c:
        up = c.post("/api/v1/api-tokens", json={"name": "up", "scopes": ["agents:write"]})
        down = c.post(f"/api/v1/api-tokens/{token_id(console, console.token)}/revoke")
    assert (up.status_code, down.status_code) == (403, 403)
    lines = audit_lines(console, "scope_escalation_refused")
    assert len(lines) == 2, lines
    assert all(f"token_id={delegate['id']}" in line for line in lines)
    assert "action=mint" in lines[0] and "scopes=agents:write" in lines[0]
    assert "action=revoke" in lines[1]
    assert delegate["token"] not in console.log_path.read_text()


def test_a_cross_tenant_403_is_audited_from_the_api_and_the_web(console_factory: ConsoleFactory):
    console = console_factory()
    victims = create_rollout(console, "victims")
    intruder = console.bootstrap(client="mallory", environment="dev")["token"]
    with console.client(intruder) as c:
        api = c.get(f"/api/v1/fleet/rollouts/{victims['id']}")
        revoke = c.post(f"/api/v1/api-tokens/{token_id(console, console.token)}/revoke")
    assert api.status_code == 403 and api.json()["reason"] == "wrong_environment"
    assert revoke.status_code == 403 and revoke.json()["reason"] == "wrong_environment"
    with browser(console.url) as b:
        signed_in(b, intruder)
        page = b.get(f"/rollouts/{victims['id']}")
    assert page.status_code in (403, 404)
    lines = audit_lines(console, "access_refused")
    assert len(lines) == 3, lines
    intruder_id = token_id(console, intruder)
    assert all(f"token_id={intruder_id}" in line for line in lines)
    assert all("reason=wrong_environment" in line for line in lines)
    assert "scope=rollouts:read" in lines[0] and "scope=tokens:write" in lines[1]
