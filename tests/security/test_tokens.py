"""API token rules, attacked on a real Console: a token holding ``tokens:write`` mints
children that never outlive it (neither by time nor by its revocation), never outrank it, and
it cannot revoke a token holding scopes it lacks. Token changes are in the audit log, never the
tokens themselves."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from testkit.console import ConsoleProcess, Identity
from testkit.fixtures import ConsoleFactory

DELEGATE = ["tokens:write", "tokens:read", "agents:read"]


def mint(console: ConsoleProcess, by: str, scopes: list[str], **body: Any) -> dict[str, Any]:
    with console.client(by) as c:
        r = c.post("/api/v1/api-tokens", json={"name": "child", "scopes": scopes, **body})
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


def whoami(console: ConsoleProcess, token: str) -> httpx.Response:
    with console.client(token) as c:
        return c.get("/api/v1/whoami")


def test_a_child_never_outlives_its_parent(console_factory: ConsoleFactory):
    console = console_factory()
    delegate = mint(console, console.token, DELEGATE, expires_in_seconds=3600)
    forever = mint(console, delegate["token"], ["agents:read"])  # asks never to expire
    longer = mint(console, delegate["token"], ["agents:read"], expires_in_seconds=10**7)
    limit = datetime.fromisoformat(delegate["expires_at"])
    for kid in (forever, longer):
        assert kid["expires_at"] is not None
        assert datetime.fromisoformat(kid["expires_at"]) <= limit
        assert kid["parent_id"] == delegate["id"]


def test_revoking_a_token_revokes_what_it_minted(console_factory: ConsoleFactory):
    console = console_factory()
    delegate = mint(console, console.token, DELEGATE)
    kid = mint(console, delegate["token"], DELEGATE)
    grandkid = mint(console, kid["token"], ["agents:read"])
    assert whoami(console, grandkid["token"]).status_code == 200
    with console.client() as admin:
        assert admin.post(f"/api/v1/api-tokens/{delegate['id']}/revoke").status_code == 200
    for t in (delegate, kid, grandkid):
        r = whoami(console, t["token"])
        assert r.status_code == 401 and r.json()["reason"] == "token_revoked"
    assert whoami(console, console.token).status_code == 200


def test_revoking_a_token_revokes_the_install_tokens_it_minted(console_factory: ConsoleFactory):
    """A leaked delegate minted install tokens (itself and through a child): revoking the
    delegate ends them all; an install token the admin minted keeps working."""
    console = console_factory()
    delegate = mint(console, console.token, DELEGATE)
    kid = mint(console, delegate["token"], DELEGATE)
    minted = [console.install_token(by=t) for t in (delegate["token"], kid["token"])]
    kept = console.install_token()
    with console.client() as admin:
        assert admin.post(f"/api/v1/api-tokens/{delegate['id']}/revoke").status_code == 200
    for n, install in enumerate(minted):
        r = Identity(name=f"late-{n}").enroll(console, install)
        assert r.status_code == 401 and r.json()["reason"] == "install_token_revoked", r.text
    assert Identity(name="kept").enroll(console, kept).status_code == 201
    revoked = [
        line for line in console.log_path.read_text().splitlines() if "api_token_revoked" in line
    ]
    assert revoked and "install_tokens_revoked" in revoked[-1]


def test_a_child_never_outranks_its_parent(console_factory: ConsoleFactory):
    console = console_factory()
    delegate = mint(console, console.token, DELEGATE)
    with console.client(delegate["token"]) as c:
        r = c.post(
            "/api/v1/api-tokens",
            json={"name": "up", "scopes": ["agents:read", "agents:write"]},
        )
    assert r.status_code == 403 and r.json()["reason"] == "scope_escalation"


def test_a_token_cannot_revoke_a_token_holding_scopes_it_lacks(console_factory: ConsoleFactory):
    console = console_factory()
    delegate = mint(console, console.token, DELEGATE)
    with console.client() as admin:
        admin_id = admin.get("/api/v1/whoami").json()["token_id"]
    with console.client(delegate["token"]) as c:
        r = c.post(f"/api/v1/api-tokens/{admin_id}/revoke")
    assert r.status_code == 403 and r.json()["reason"] == "scope_escalation"
    assert whoami(console, console.token).status_code == 200, "the admin token still works"


def test_token_changes_are_audited_without_the_tokens(console_factory: ConsoleFactory):
    console = console_factory()
    delegate = mint(console, console.token, DELEGATE)
    with console.client() as admin:
        admin.post(f"/api/v1/api-tokens/{delegate['id']}/revoke")
    assert whoami(console, "pxa_" + "w" * 43).status_code == 401
    log = console.log_path.read_text()
    audit = [line for line in log.splitlines() if "proxima.audit" in line]
    assert any("api_token_created" in a and delegate["id"] in a for a in audit)
    assert any("api_token_revoked" in a and delegate["id"] in a for a in audit)
    assert any("auth_failed" in a and "surface=api" in a for a in audit)
    for secret in (console.token, delegate["token"], "pxa_" + "w" * 43):
        assert secret not in log
