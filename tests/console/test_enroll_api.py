"""Enrollment and re-bind rules over HTTP against a real Console process (SQLite and PostgreSQL).

The quiet window is 1.5 s here (PROXIMA_IDENTITY_QUIET_SECONDS) instead of 300 s.
"""

import httpx

from testkit.console import QUIET_SECONDS, Identity
from testkit.waiting import wait_for


def _quiet(console, agent_id):
    wait_for(
        lambda: (console.agent(agent_id)["seconds_since_seen"] or 0) > QUIET_SECONDS + 0.2,
        timeout=10,
        what="record to go quiet",
    )


def test_a_fresh_agent_enrolls_and_a_repeat_of_the_same_request_is_harmless(console):
    token = console.install_token()
    ident = Identity(name="web-1", machine_id="m-1")
    first = ident.enroll(console, token)
    assert first.status_code == 201, first.text
    again = ident.enroll(console, token)
    assert again.status_code == 200
    assert again.json()["agent_id"] == first.json()["agent_id"]
    assert again.json()["rebound"] is False
    assert first.json()["nats_url"] == console.nats_url
    detail = console.agent(first.json()["agent_id"])
    assert detail["status"] == "online"
    assert {e["kind"] for e in detail["evidence"]} == {"machine_id"}
    assert [h["kind"] for h in detail["history"]] == ["enrolled"]


def test_a_redelivered_enrollment_is_the_same_record_even_on_a_used_up_token(console):
    """Broke: an agent whose state file could not be written (a full disk) locked its own name
    out. It now proves the same key again; the Console answers with the same record, and the
    re-delivery does not count as a use of the token."""
    token = console.install_token(max_uses=1)
    ident = Identity(name="disk-full-1", machine_id="m-9")
    first = ident.enroll(console, token)
    assert first.status_code == 201, first.text
    again = ident.enroll(console, token)
    assert again.status_code == 200, again.text
    assert again.json()["agent_id"] == first.json()["agent_id"]
    assert again.json()["nats_jwt"]
    other = Identity(name="disk-full-2").enroll(console, token)
    assert (other.status_code, other.json()["reason"]) == (401, "install_token_exhausted")
    with console.client() as c:
        assert [t["uses"] for t in c.get("/api/v1/install-tokens").json() if t["uses"]] == [1]


def test_a_name_clash_while_the_holder_is_live_is_409_name_in_use_and_flags_the_record(console):
    token = console.install_token()
    holder = Identity(name="node-a", agent_type="k8s-node-monitor", machine_id="m-a")
    agent_id = holder.enroll(console, token).json()["agent_id"]
    intruder = Identity(name="node-a", agent_type="k8s-node-monitor", machine_id="m-a")
    r = intruder.enroll(console, token)
    assert r.status_code == 409
    body = r.json()
    assert body["reason"] == "name_in_use"
    assert body["agent_id"] == agent_id
    assert "quiet window" in body["message"]
    view = console.agent(agent_id)
    assert "enrollment_conflict" in view["flags"]
    assert view["conflict"]["reason"] == "name_in_use"


def test_the_same_name_under_another_agent_type_is_a_free_name(console):
    """The chart page's host-agent case: a k8s-node-monitor enrolls beside a host record."""
    token = console.install_token()
    host = Identity(name="node-b", agent_type="host", machine_id="m-b")
    pod = Identity(name="node-b", agent_type="k8s-node-monitor", machine_id="m-b")
    a = host.enroll(console, token)
    b = pod.enroll(console, token)
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["agent_id"] != b.json()["agent_id"]


def test_a_quiet_record_is_rebound_by_every_kind_of_evidence_it_holds_keeping_id_and_history(
    console,
):
    token = console.install_token()
    old = Identity(
        name="node-c", agent_type="k8s-node-monitor", machine_id="m-c", product_uuid="u-c"
    )
    agent_id = old.enroll(console, token).json()["agent_id"]
    _quiet(console, agent_id)
    machine_id_only = Identity(name="node-c", agent_type="k8s-node-monitor", machine_id="m-c")
    refused = machine_id_only.enroll(console, token)
    assert (refused.status_code, refused.json()["reason"]) == (409, "identity_mismatch")
    assert "product_uuid" in refused.json()["message"]
    moved = Identity(
        name="node-c", agent_type="k8s-node-monitor", machine_id="m-c", product_uuid="U-C"
    )
    r = moved.enroll(console, token)
    assert r.status_code == 200, r.text
    assert r.json() == {**r.json(), "agent_id": agent_id, "rebound": True}
    kinds = [h["kind"] for h in console.agent(agent_id)["history"]]
    assert (kinds[0], kinds[-1]) == ("rebound", "enrolled")


def test_the_dmi_product_uuid_alone_is_enough_evidence(console):
    token = console.install_token()
    agent_id = Identity(name="n-d", product_uuid="AAAA-1").enroll(console, token).json()["agent_id"]
    _quiet(console, agent_id)
    r = Identity(name="n-d", product_uuid="aaaa-1").enroll(console, token)
    assert (r.status_code, r.json()["agent_id"]) == (200, agent_id)


def test_no_rebind_without_identity_evidence(console):
    token = console.install_token()
    agent_id = Identity(name="n-e").enroll(console, token).json()["agent_id"]
    _quiet(console, agent_id)
    r = Identity(name="n-e", machine_id="m-e").enroll(console, token)
    assert r.status_code == 409
    assert r.json()["reason"] == "no_identity_evidence"
    assert "release-identity" in r.json()["message"]
    assert "no_identity_evidence" in console.agent(agent_id)["flags"]


def test_no_rebind_when_no_presented_signal_matches(console):
    token = console.install_token()
    agent_id = Identity(name="n-f", machine_id="m-f").enroll(console, token).json()["agent_id"]
    _quiet(console, agent_id)
    r = Identity(name="n-f", machine_id="someone-else").enroll(console, token)
    assert (r.status_code, r.json()["reason"]) == (409, "identity_mismatch")


def test_no_rebind_of_a_revoked_record(console):
    token = console.install_token()
    agent_id = Identity(name="n-g", machine_id="m-g").enroll(console, token).json()["agent_id"]
    with console.client() as c:
        assert c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").status_code == 200
    _quiet(console, agent_id)
    r = Identity(name="n-g", machine_id="m-g").enroll(console, token)
    assert (r.status_code, r.json()["reason"]) == (409, "agent_revoked")


def test_repeated_clashes_flag_the_record_without_flooding_its_history(console):
    token = console.install_token()
    agent_id = Identity(name="n-h").enroll(console, token).json()["agent_id"]
    for _ in range(5):
        assert Identity(name="n-h").enroll(console, token).status_code == 409
    detail = console.agent(agent_id)
    assert detail["conflict"]["count"] == 5
    assert [h["kind"] for h in detail["history"]].count("enrollment_conflict") == 1


def _count(console):
    with console.client() as c:
        return c.get("/api/v1/fleet/agents").json()["total"]


def _uses(console):
    with console.client() as c:
        return [t["uses"] for t in c.get("/api/v1/install-tokens").json()]


def test_bad_input_gets_a_4xx_with_a_reason_and_changes_nothing(console):
    token = console.install_token()
    url = f"{console.url}/api/v1/agents/enroll"
    ident = Identity(name="bad-1", machine_id="m")
    cases = [
        (
            httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}),
            400,
            "malformed_json",
        ),
        (
            httpx.post(url, json={**ident.enroll_body(token), "agent_type": "toaster"}),
            422,
            "invalid_request",
        ),
        (httpx.post(url, json={**ident.enroll_body(token), "name": 12345}), 422, "invalid_request"),
        (
            httpx.post(url, json={**ident.enroll_body(token), "name": "x" * 300}),
            422,
            "invalid_request",
        ),
        (
            httpx.post(url, json={**ident.enroll_body(token), "unexpected": 1}),
            422,
            "invalid_request",
        ),
        (
            httpx.post(
                url,
                content=b"{" + b" " * 70_000 + b"}",
                headers={"content-type": "application/json"},
            ),
            413,
            "request_too_large",
        ),
        (
            httpx.post(
                url, json={**ident.enroll_body(token), "signature": Identity(name="o").sign(b"x")}
            ),
            401,
            "bad_signature",
        ),
        (
            httpx.post(
                url, json={**ident.enroll_body(token), "signed_at": "2020-01-01T00:00:00+00:00"}
            ),
            401,
            "stale_signature",
        ),
        (
            httpx.post(url, json=ident.enroll_body("pxi_not-a-real-token")),
            401,
            "invalid_install_token",
        ),
    ]
    for response, status, reason in cases:
        assert (response.status_code, response.json()["reason"]) == (status, reason), response.text
        assert response.json()["message"]
    assert _count(console) == 0
    assert _uses(console) == [0]


def test_expired_used_up_and_revoked_install_tokens_are_refused(console):
    used_up = console.install_token(max_uses=1)
    assert Identity(name="t-1").enroll(console, used_up).status_code == 201
    r = Identity(name="t-2").enroll(console, used_up)
    assert (r.status_code, r.json()["reason"]) == (401, "install_token_exhausted")

    expiring = console.install_token(expires_in_seconds=1)
    with console.client() as c:
        tokens = c.get("/api/v1/install-tokens").json()
        expiring_id = next(t["id"] for t in tokens if t["state"] == "active")
        wait_for(
            lambda: any(t["state"] == "expired" for t in c.get("/api/v1/install-tokens").json()),
            timeout=5,
            what="token to expire",
        )
    r = Identity(name="t-3").enroll(console, expiring)
    assert r.json()["reason"] == "install_token_expired"

    revoked = console.install_token()
    with console.client() as c:
        listed = c.get("/api/v1/install-tokens").json()
        rid = next(t["id"] for t in listed if t["id"] != expiring_id and t["state"] == "active")
        assert c.post(f"/api/v1/install-tokens/{rid}/revoke").json()["state"] == "revoked"
    r = Identity(name="t-4").enroll(console, revoked)
    assert (r.status_code, r.json()["reason"]) == (401, "install_token_revoked")
    assert _count(console) == 1


def test_install_tokens_are_shown_once_and_stored_hashed(console):
    raw = console.install_token(name="once")
    with console.client() as c:
        listed = c.get("/api/v1/install-tokens").json()
    assert listed, "the token just made is not listed"
    assert all("token" not in t for t in listed)
    assert listed[0]["prefix"] == raw[:10]
    db = console.data_dir / "console.db"
    if db.exists():
        assert raw.encode() not in db.read_bytes()


def test_concurrent_enrollments_never_use_a_token_past_its_limit(console):
    """Each enrollment read the token's uses, checked them, then added one. On PostgreSQL that
    was safe only by accident: the rate-limit counters, counted inside the enrollment, held a
    row lock that ran enrollments one at a time. Counted in their own transaction (so that
    concurrent enrollments stop queueing on them), enrollments running at once all passed a
    limit of 3 — this test, with the old unconditional ``uses + 1``. The use is now added only
    while uses are left, as the enrollment's last write; one that loses the last use writes
    nothing."""
    from concurrent.futures import ThreadPoolExecutor

    token = console.install_token(max_uses=3)
    identities = [Identity(name=f"burst-{i}", machine_id=f"m-burst-{i}") for i in range(12)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda ident: ident.enroll(console, token), identities))
    codes = sorted(r.status_code for r in answers)
    assert codes == [201] * 3 + [401] * 9, [(r.status_code, r.text[:80]) for r in answers]
    assert {r.json()["reason"] for r in answers if r.status_code == 401} == {
        "install_token_exhausted"
    }
    with console.client() as c:
        listed = c.get("/api/v1/fleet/agents", params={"limit": 50}).json()["items"]
        assert sorted(a["name"] for a in listed if a["name"].startswith("burst-")) == sorted(
            r.json()["name"] for r in answers if r.status_code == 201
        )
        assert [t["uses"] for t in c.get("/api/v1/install-tokens").json() if t["uses"]] == [3]
