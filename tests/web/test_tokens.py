"""Tokens: an install token is shown once and can be revoked; an API token grants at most the
scopes of the one that made it, is shown once, and signs in."""

from __future__ import annotations

import re

from playwright.sync_api import expect


def _open(page, summary: str) -> None:
    details = page.locator("details", has=page.locator("summary", has_text=summary))
    if details.get_attribute("open") is None:
        details.locator("summary").click()


def test_tokens_are_shown_once_revoked_and_scoped(web_console, ui):
    view = ui(web_console)
    page = view.page
    view.goto("/tokens")
    _open(page, "Create an install token")
    page.fill("#it-name", "edge rack 4")
    page.fill("#it-uses", "3")
    page.get_by_role("button", name="Create install token").click()
    shown = page.locator("#install-token-value").inner_text()
    assert shown.startswith("pxi_")
    row = page.locator("#install-tokens tr", has_text="edge rack 4")
    expect(row).to_contain_text("0 / 3")
    expect(row.locator(".badge")).to_have_text("active")
    view.goto("/tokens")
    assert shown not in page.content()  # shown once
    row.get_by_role("button", name=re.compile("Revoke install token edge rack 4")).click()
    expect(page.locator(".flash-ok")).to_contain_text("revoked")
    expect(row.locator(".badge")).to_have_text("revoked")

    _open(page, "Create an API token")
    page.fill("#at-name", "grafana")
    page.check("#scope-agents-read")
    page.check("#scope-clusters-read")
    page.get_by_role("button", name="Create API token").click()
    api_token = page.locator("#api-token-value").inner_text()
    assert api_token.startswith("pxa_")
    expect(page.locator("#api-tokens tr", has_text="grafana")).to_contain_text(
        "agents:read clusters:read"
    )
    view.shot("tokens", focus="#new-api-token")

    reader = ui(web_console, api_token)
    reader.goto("/agents")
    expect(reader.page.locator("header .who")).to_contain_text("grafana")
    reader.expect_failed_load(403)
    reader.goto("/tokens")
    expect(reader.page.locator("code.reason")).to_have_text("missing_scope")

    limited = ui(web_console, web_console.api_token(["tokens:write", "agents:read"]))
    with limited.http() as http:
        limited.goto("/tokens")
        r = http.post(
            "/tokens/api",
            data={
                "csrf_token": limited.csrf(),
                "name": "escalate",
                "scopes": ["agents:read", "agents:write"],
            },
        )
    assert r.status_code == 403 and "scope_escalation" in r.text


def test_a_refused_token_form_shows_every_error_beside_its_field(web_console, ui):
    """What broke: the page showed the first validation error only, as a flash at the top,
    and forgot what was typed. Each error is now drawn beside its field, the form kept open
    with its values."""
    view = ui(web_console)
    page = view.page
    view.goto("/tokens")
    _open(page, "Create an API token")
    page.fill("#at-name", "no scopes")
    page.get_by_role("button", name="Create API token").click()
    expect(page.locator("#at-scopes-error")).to_contain_text("at least 1 item")
    expect(page.locator("#at-scopes")).to_have_attribute("aria-invalid", "true")
    assert page.locator("#at-name").input_value() == "no scopes"  # kept
    expect(page.locator("#at-name")).not_to_have_attribute("aria-invalid", "true")
    expect(page.locator(".flash-error")).to_contain_text("API token was not created")

    _open(page, "Create an install token")
    page.fill("#it-name", "big rack")
    page.fill("#it-uses", "2000000")
    page.fill("#it-slug", "x" * 63)
    page.get_by_role("button", name="Create install token").click()
    expect(page.locator("#it-uses-error")).to_contain_text("1000000")
    expect(page.locator("#it-uses")).to_have_attribute("aria-describedby", "it-uses-error")
    assert page.locator("#it-name").input_value() == "big rack"
    assert page.locator("#install-tokens tr", has_text="big rack").count() == 0
