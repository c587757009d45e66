"""Signing in to a real Console's pages over plain HTTP (no browser), for the attack tests."""

from __future__ import annotations

import re

import httpx

from console.web.sessions import SESSION_COOKIE, SIGN_IN_COOKIE

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def browser(url: str, source: str = "127.0.0.1") -> httpx.Client:
    """A cookie-keeping client whose connections come from ``source`` (any 127.0.0.0/8
    address: a distinct source address as the Console sees it)."""
    return httpx.Client(
        base_url=url,
        timeout=30,
        follow_redirects=False,
        transport=httpx.HTTPTransport(local_address=source),
    )


def sign_in(client: httpx.Client, token: str) -> httpx.Response:
    """GET the form (its nonce), POST the token; the answer as the Console gave it."""
    page = client.get("/sign-in")
    match = CSRF.search(page.text)
    assert match, page.text[:500]
    client.cookies.set(SIGN_IN_COOKIE, page.cookies.get(SIGN_IN_COOKIE) or "", path="/sign-in")
    return client.post("/sign-in", data={"token": token, "csrf_token": match[1], "next": ""})


def signed_in(client: httpx.Client, token: str) -> str:
    """Sign in; the session cookie's value (also kept in the client)."""
    answer = sign_in(client, token)
    assert answer.status_code == 303, answer.text[:500]
    cookie = answer.cookies.get(SESSION_COOKIE)
    assert cookie
    client.cookies.set(SESSION_COOKIE, cookie)
    return cookie


def page_status(url: str, cookie: str, path: str = "/clusters") -> int:
    """What a browser holding ``cookie`` gets for ``path``: 200, or 303 to the sign-in page."""
    r = httpx.get(url + path, cookies={SESSION_COOKIE: cookie}, follow_redirects=False, timeout=30)
    return r.status_code
