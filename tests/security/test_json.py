"""Strict JSON and one error shape, against a real Console.

What broke: ``NaN``, ``Infinity`` and lone surrogates in any JSON body gave 500, unauthenticated
endpoints included, and error bodies were not always ``{reason, message}`` (FastAPI's 404, 405
and 422 answered ``{"detail": …}``).
"""

from __future__ import annotations

import httpx

from contracts.enrollment import ErrorBody
from contracts.vocabulary import ErrorReason
from testkit.console import ConsoleProcess, Identity

# Raw bodies: each is valid for Python's json module and invalid for RFC 8259 / the Console.
POISONS = {
    "nan": b'{"name": "x", "wave_timeout_seconds": NaN, "x": NaN}',
    "infinity": b'{"name": "x", "wave_timeout_seconds": Infinity}',
    "minus_infinity": b'{"name": "x", "expires_in_seconds": -Infinity}',
    "lone_surrogate": b'{"name": "\\ud800", "slug": "a"}',
    "lone_low_surrogate": b'{"name": "x\\udfff"}',
    "nul": b'{"name": "a\\u0000b"}',
}

ENDPOINTS = [
    ("POST", "/api/v1/agents/enroll", False),
    ("POST", "/api/v1/agents/0123456789abcdef0123456789abcdef/nats-credentials", False),
    ("POST", "/api/v1/agents/0123456789abcdef0123456789abcdef/credentials", False),
    ("POST", "/api/v1/fleet/rollouts", True),
    ("POST", "/api/v1/clusters", True),
    ("POST", "/api/v1/install-tokens", True),
    ("POST", "/api/v1/api-tokens", True),
    ("POST", "/api/v1/audit/runs", True),
]


def _is_error_body(response: httpx.Response) -> ErrorBody:
    body = ErrorBody.model_validate(response.json())
    assert body.reason in {r.value for r in ErrorReason}, body
    assert body.message
    return body


def test_nan_infinity_surrogates_and_nul_are_a_400_everywhere(console: ConsoleProcess) -> None:
    seen: list[str] = []
    for method, path, authenticated in ENDPOINTS:
        headers = {"content-type": "application/json"}
        if authenticated:
            headers["authorization"] = f"Bearer {console.token}"
        for name, raw in POISONS.items():
            r = httpx.request(method, f"{console.url}{path}", content=raw, headers=headers)
            assert r.status_code == 400, (path, name, r.status_code, r.text)
            assert _is_error_body(r).reason == ErrorReason.MALFORMED_JSON, (path, name)
            seen.append(f"{path} {name}")
    assert len(seen) == len(ENDPOINTS) * len(POISONS)
    # The Console is still whole: a real enrollment goes through.
    r = Identity(name="after-the-poison").enroll(console, console.install_token())
    assert r.status_code == 201, r.text


def test_every_error_is_reason_and_message(console: ConsoleProcess) -> None:
    with console.client() as c:
        cases = {
            "unknown route": (c.get("/api/v1/no-such-thing"), 404, ErrorReason.NOT_FOUND),
            "wrong method": (c.delete("/api/v1/clusters"), 405, ErrorReason.METHOD_NOT_ALLOWED),
            "invalid body": (
                c.post("/api/v1/clusters", json={"name": ""}),
                422,
                ErrorReason.INVALID_REQUEST,
            ),
            "bad query": (
                c.get("/api/v1/fleet/agents", params={"limit": "many"}),
                422,
                ErrorReason.INVALID_REQUEST,
            ),
            "a label filter that is not k=v": (
                c.get("/api/v1/fleet/agents", params={"label": "tier"}),
                422,
                ErrorReason.INVALID_REQUEST,
            ),
            "not json": (
                c.post(
                    "/api/v1/clusters",
                    content=b"{nope",
                    headers={"content-type": "application/json"},
                ),
                400,
                ErrorReason.MALFORMED_JSON,
            ),
            "too large": (
                c.post("/api/v1/clusters", json={"name": "x" * 70_000}),
                413,
                ErrorReason.REQUEST_TOO_LARGE,
            ),
        }
    unauthenticated = httpx.get(f"{console.url}/api/v1/clusters")
    cases["no token"] = (unauthenticated, 401, ErrorReason.MISSING_TOKEN)
    for name, (response, status, reason) in cases.items():
        assert response.status_code == status, (name, response.status_code, response.text)
        assert _is_error_body(response).reason == reason, (name, response.text)
