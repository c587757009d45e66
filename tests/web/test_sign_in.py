"""Signing in with an API token, the session cookie, CSRF on every POST, scopes like the API."""

import re

import httpx

from testkit.console import Identity

READ_ONLY = ["agents:read", "clusters:read", "rollouts:read", "tokens:read"]


def test_a_wrong_token_is_refused_and_a_good_one_opens_a_session_cookie(web_console, ui):
    view = ui(web_console, sign_in=False)
    page = view.page
    view.goto("/agents")
    assert "/sign-in?next=%2Fagents" in page.url
    view.shot("sign-in")
    # A required field is not drawn as an error before anyone typed in it.
    border = "getComputedStyle(document.querySelector('#token')).borderTopColor"
    assert page.evaluate(border) != "rgb(164, 22, 26)"
    page.fill("#token", "pxa_not-a-token")
    page.click("button[type=submit]")
    assert page.locator("#sign-in-error").inner_text() == "API token is not valid"
    page.fill("#token", web_console.token)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/agents$"))  # back where it was sent from
    cookie = next(c for c in page.context.cookies() if c["name"] == "proxima_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and not cookie["secure"]
    assert web_console.token not in cookie["value"]
    assert page.locator("header .who").inner_text().startswith("acme / prod")

    page.click("text=Sign out")
    page.wait_for_url(re.compile(r"/sign-in\?reason=signed_out"))
    assert "You signed out." in page.content()
    view.goto("/agents")
    assert "/sign-in" in page.url


def test_posts_without_this_sessions_csrf_token_are_refused(web_console, ui):
    view = ui(web_console)
    view.goto("/tokens")
    csrf = view.csrf()
    with view.http() as http:
        missing = http.post("/tokens/install", data={"name": "x"})
        wrong = http.post("/tokens/install", data={"name": "x", "csrf_token": "forged"})
        good = http.post("/tokens/install", data={"name": "x", "csrf_token": csrf})
    assert missing.status_code == 403 and "csrf_failed" in missing.text
    assert wrong.status_code == 403 and "csrf_failed" in wrong.text
    assert good.status_code == 303
    # The sign-in form is protected too: no nonce cookie, no session.
    forged = httpx.post(
        f"{web_console.url}/sign-in", data={"token": web_console.token, "csrf_token": "x"}
    )
    assert forged.status_code == 403 and "proxima_session" not in forged.headers.get(
        "set-cookie", ""
    )
    with httpx.Client(base_url=web_console.url) as anonymous:
        r = anonymous.post("/tokens/install", data={"name": "x", "csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"].startswith("/sign-in")


def test_a_read_only_token_sees_no_actions_and_every_write_is_403(web_console, ui):
    ident = Identity(name="web-01")
    agent_id = ident.enroll(web_console, web_console.install_token()).json()["agent_id"]
    view = ui(web_console, web_console.api_token(READ_ONLY))
    page = view.page
    view.goto("/clusters")
    assert page.locator("text=Add a cluster").count() == 0
    view.goto(f"/agents/{agent_id}")
    assert page.locator("h1").inner_text().startswith("web-01")
    for action in ("Release identity", "Rotate credentials", "Revoke"):
        assert page.get_by_role("link", name=action, exact=True).count() == 0
    view.goto("/rollouts")
    assert page.locator("text=Start a rollout").count() == 0
    view.goto("/tokens")
    assert page.locator("text=Create an install token").count() == 0
    assert page.locator("button:has-text('Revoke')").count() == 0

    view.expect_failed_load(403)
    view.goto("/clusters/add")
    assert "lacks the 'clusters:write' scope" in page.locator(".error-message").inner_text()
    assert page.locator("code.reason").inner_text() == "missing_scope"
    view.shot("forbidden")
    csrf = view.csrf()
    with view.http() as http:
        for path in (
            f"/agents/{agent_id}/release-identity",
            f"/agents/{agent_id}/revoke",
            "/clusters/add",
            "/rollouts/new",
            "/tokens/install",
        ):
            r = http.post(path, data={"csrf_token": csrf, "name": "x"})
            assert r.status_code == 403, (path, r.status_code)
            assert "missing_scope" in r.text, path
    assert web_console.agent(agent_id)["status"] != "released"


def test_a_token_without_a_read_scope_gets_the_reason_not_the_page(web_console, ui):
    view = ui(web_console, web_console.api_token(["agents:read"]))
    assert view.page.url.endswith("/agents")  # signed in onto a page it may read
    view.goto("/")
    assert view.page.url.endswith("/agents")
    view.expect_failed_load(403)
    view.goto("/clusters")
    assert "lacks the 'clusters:read' scope" in view.page.content()


def test_revoking_the_api_token_ends_its_web_session(web_console, ui):
    token = web_console.api_token(["agents:read", "tokens:read", "tokens:write"])
    view = ui(web_console, token)
    view.goto("/tokens")
    own = view.page.locator("#api-tokens tr", has_text="this session")
    own.locator("button:has-text('Revoke')").click()
    view.page.wait_for_url(re.compile(r"/sign-in\?.*reason=token_revoked"))
    assert "has been revoked" in view.page.content()


def test_behind_https_the_session_cookie_is_secure(console_factory):
    """Behind a TLS proxy (X-Forwarded-Proto from a PROXIMA_TRUSTED_PROXIES address) the cookie
    says Secure."""
    web_console = console_factory(env={"PROXIMA_TRUSTED_PROXIES": "127.0.0.1"})
    https = {"X-Forwarded-Proto": "https"}
    form = httpx.get(f"{web_console.url}/sign-in", headers=https)
    nonce = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
    assert "Secure" in form.headers["set-cookie"]
    signed_in = httpx.post(
        f"{web_console.url}/sign-in",
        headers={**https, "Cookie": f"proxima_sign_in={form.cookies['proxima_sign_in']}"},
        data={"csrf_token": nonce, "token": web_console.token},
    )
    assert signed_in.status_code == 303
    session = next(
        v for k, v in signed_in.headers.multi_items() if v.startswith("proxima_session=")
    )
    assert {"HttpOnly", "Secure", "SameSite=lax"} <= {p.strip() for p in session.split(";")}
