"""What the Console publishes for the flows: its windows (GET /api/v1/settings), the onboarding
gates of a cluster, and a dry run of release-identity that decides like the real call."""

import httpx

from contracts.views import ConsoleSettingsView, ReleaseDecision
from contracts.vocabulary import ReleaseOutcome
from testkit.console import QUIET_SECONDS, Identity
from testkit.waiting import wait_for


def _release(console, agent_id, token=None, dry_run=False):
    with console.client(token) as c:
        return c.post(
            f"/api/v1/fleet/agents/{agent_id}/release-identity",
            params={"dry_run": "true"} if dry_run else None,
        )


def test_settings_are_readable_with_any_valid_token(console):
    narrow = console.api_token(["tokens:read"])
    with console.client(narrow) as c:
        r = c.get("/api/v1/settings")
    assert r.status_code == 200, r.text
    body = r.json()
    view = ConsoleSettingsView.model_validate(body)
    assert view.quiet_window_seconds == QUIET_SECONDS
    assert view.stale_after_seconds == QUIET_SECONDS
    assert view.k8s_sync_interval_seconds > 0
    assert body["enroll_clock_skew_seconds"] > 0 and body["k8s_sync_interval"]
    r = httpx.get(f"{console.url}/api/v1/settings")
    assert (r.status_code, r.json()["reason"]) == (401, "missing_token")


def test_release_dry_run_decides_like_the_real_call_and_changes_nothing(console):
    token = console.install_token()
    agent_id = Identity(name="d-1").enroll(console, token).json()["agent_id"]
    reader = console.api_token(["agents:read"])
    r = _release(console, agent_id, reader, dry_run=True)
    assert (r.status_code, r.json()["reason"]) == (403, "missing_scope")
    r = _release(console, agent_id, dry_run=True)
    assert (r.status_code, r.json()["reason"]) == (409, "agent_recently_seen")
    assert _release(console, agent_id).json()["reason"] == "agent_recently_seen"
    wait_for(lambda: (console.agent(agent_id)["seconds_since_seen"] or 0) > QUIET_SECONDS + 0.2)
    history = console.agent(agent_id)["history"]
    r = _release(console, agent_id, dry_run=True)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "released"
    decision = ReleaseDecision.model_validate(r.json())
    assert (decision.agent_id, decision.outcome, decision.dry_run) == (
        agent_id,
        ReleaseOutcome.WOULD_RELEASE,
        True,
    )
    assert decision.reason is None
    after = console.agent(agent_id)
    assert after["status"] == "offline"
    assert after["history"] == history
    r = _release(console, agent_id)
    assert (r.status_code, r.json()["status"]) == (200, "released")
    assert (r.json()["outcome"], r.json()["dry_run"]) == ("released", False)
    again = _release(console, agent_id, dry_run=True).json()
    assert (again["outcome"], again["status"]) == ("already_released", "released")
    with console.client() as c:
        c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").raise_for_status()
    r = _release(console, agent_id, dry_run=True)
    assert (r.status_code, r.json()["reason"]) == (409, "agent_revoked")


def test_onboarding_gates_are_served_for_a_cluster(console):
    with console.client() as c:
        c.post("/api/v1/clusters", json={"name": "Edge One"}).raise_for_status()
        r = c.get("/api/v1/clusters/edge-one/onboarding")
        assert r.status_code == 200, r.text
        body = r.json()
        assert [g["key"] for g in body["checks"]] == ["enrollment", "heartbeat", "inventory"]
        assert [g["ok"] for g in body["checks"]] == [False, False, False]
        assert body["done"] is False
        assert body["checks"][0]["causes"], "a pending gate says why"
        assert c.get("/api/v1/clusters/nope/onboarding").json()["reason"] == "cluster_not_found"
    token = console.install_token(cluster_slug="edge-one")
    Identity(name="edge-one-collector", agent_type="k8s-cluster-collector").enroll(
        console, token
    ).raise_for_status()
    with console.client() as c:
        checks = c.get("/api/v1/clusters/edge-one/onboarding").json()["checks"]
    assert [g["ok"] for g in checks] == [True, False, False]
    writer = console.api_token(["clusters:write"])
    with console.client(writer) as c:
        r = c.get("/api/v1/clusters/edge-one/onboarding")
    assert (r.status_code, r.json()["reason"]) == (403, "missing_scope")


def test_an_unconfigured_console_publishes_the_pages_windows(console_factory):
    """The page's 5-minute quiet window (and the stale timeout) are the defaults a Console
    started with no window settings actually runs with, not only constants."""
    plain = console_factory("plain")
    with plain.client(plain.api_token(["tokens:read"])) as c:
        view = ConsoleSettingsView.model_validate(c.get("/api/v1/settings").json())
    assert view.quiet_window_seconds == 300.0
    assert view.stale_after_seconds == 70.0
