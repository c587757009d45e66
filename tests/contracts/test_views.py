"""The read views in ``contracts.views`` match what the Console serves, field for field, and
validate payloads a real Console answers (SQLite; the postgres lane adds PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from console.api.routes import api_tokens, clusters, fleet
from console.core.settings import ConsoleSettings
from console.services import onboarding
from contracts.views import (
    AgentDetailView,
    AgentPage,
    AgentView,
    ClusterView,
    ConsoleSettingsView,
    OnboardingStatus,
    ReleaseDecision,
)
from contracts.vocabulary import AgentStatus, ErrorReason, ReleaseOutcome
from rollout_policy import DEFAULT_QUIET_WINDOW_SECONDS, DEFAULT_STALE_AFTER_SECONDS
from testkit.console import Identity


def _served(path: str, method: str = "GET") -> type[BaseModel]:
    """The response model the Console's API declares for a route."""
    routers = (api_tokens.router, clusters.router, fleet.router)
    for route in (r for router in routers for r in router.routes):
        if isinstance(route, APIRoute) and route.path == path and method in route.methods:
            model = route.response_model
            inner = getattr(model, "__args__", None)
            return inner[0] if inner else model  # type: ignore[no-any-return]
    raise AssertionError(f"no route {method} {path}")


@pytest.mark.parametrize(
    ("path", "view"),
    [
        ("/api/v1/fleet/agents", AgentPage),
        ("/api/v1/fleet/agents/{agent_id}", AgentDetailView),
        ("/api/v1/clusters", ClusterView),
        ("/api/v1/clusters/{slug}", ClusterView),
        ("/api/v1/clusters/{slug}/onboarding", OnboardingStatus),
        ("/api/v1/settings", ConsoleSettingsView),
    ],
)
def test_the_console_answers_with_the_view_itself(path: str, view: type[BaseModel]) -> None:
    """One home per shape: the route's model is the view, or extends it with Console-only
    fields (the onboarding checklist's warnings, the other timings of the settings)."""
    served = _served(path)
    assert issubclass(served, view), (served, view)
    assert set(view.model_fields) <= set(served.model_fields)


def test_release_identity_answers_the_record_and_the_decision() -> None:
    served = _served("/api/v1/fleet/agents/{agent_id}/release-identity", "POST")
    assert issubclass(served, AgentView) and issubclass(served, ReleaseDecision)


def _round_trips(view: type[BaseModel], payload: dict[str, Any]) -> None:
    parsed = view.model_validate(payload)
    assert parsed.model_dump(mode="json") == payload


def test_agents_a_real_console_serves_validate(console: Any) -> None:
    token = console.install_token()
    ident = Identity(name="web-1", machine_id="m-1")
    assert ident.enroll(console, token).status_code == 201
    clash = Identity(name="web-1", machine_id="m-1").enroll(console, token)
    assert clash.json()["reason"] == ErrorReason.NAME_IN_USE
    with console.client() as c:
        page = c.get("/api/v1/fleet/agents").json()
    parsed = AgentPage.model_validate(page)
    assert parsed.total == 1
    agent = parsed.items[0]
    assert agent.status is AgentStatus.ONLINE
    assert agent.conflict is not None
    assert agent.conflict.reason == ErrorReason.NAME_IN_USE
    _round_trips(AgentView, page["items"][0])
    _round_trips(AgentDetailView, console.agent(agent.id))


def test_a_cluster_a_real_console_serves_validates(console: Any) -> None:
    with console.client() as c:
        c.post("/api/v1/clusters", json={"name": "Production RKE2"}).raise_for_status()
        payload = c.get("/api/v1/clusters/production-rke2").json()
        listed = c.get("/api/v1/clusters").json()
    _round_trips(ClusterView, payload)
    assert [ClusterView.model_validate(x).slug for x in listed] == ["production-rke2"]


def test_the_onboarding_status_the_console_builds_validates() -> None:
    status = onboarding.OnboardingStatus(
        slug="prod",
        checks=[
            onboarding.Check(
                key="enrollment",
                title="Cluster agent enrolled",
                ok=False,
                detail="No k8s-cluster-collector has enrolled for this slug yet.",
                causes=[
                    onboarding.Cause(
                        issue="Cluster not appearing in Console",
                        cause="Collector not enrolling",
                        fix="Check logs for enrollment errors, verify install token",
                    )
                ],
            ),
            onboarding.Check(
                key="heartbeat", title="First heartbeat", ok=False, detail="…", causes=[]
            ),
        ],
        done=False,
        node_agents=0,
        nodes=None,
        tokens_usable=1,
    )
    _round_trips(OnboardingStatus, status.model_dump(mode="json"))
    # The checklist's JSON adds the cluster's warnings; the view ignores what it does not know.
    body = {**status.model_dump(mode="json"), "warnings": [{"kind": "unregistered", "message": ""}]}
    assert OnboardingStatus.model_validate(body).slug == "prod"


def test_the_console_settings_view_carries_the_windows_and_the_defaults_agree() -> None:
    default = {name: field.default for name, field in ConsoleSettings.model_fields.items()}
    view = ConsoleSettingsView(
        quiet_window_seconds=default["identity_quiet_seconds"],
        stale_after_seconds=default["agent_stale_seconds"],
        k8s_sync_interval_seconds=300,
        rotation_timeout_seconds=default["rotation_timeout_seconds"],
    )
    assert view.quiet_window_seconds == DEFAULT_QUIET_WINDOW_SECONDS
    assert view.stale_after_seconds == DEFAULT_STALE_AFTER_SECONDS


@pytest.mark.parametrize(
    "row",
    [
        # What the identity-release flow reports today, one row per outcome.
        {"agent_id": "a1", "outcome": "would_release", "reason": None, "message": "dry run"},
        {"agent_id": "a2", "outcome": "refused", "reason": "agent_recently_seen", "message": ""},
        {"agent_id": "a3", "outcome": "refused", "reason": "agent_revoked", "message": ""},
        {"agent_id": "a4", "outcome": "already_released", "reason": None, "message": ""},
        {"agent_id": "a5", "outcome": "released", "reason": None, "message": "", "dry_run": False},
    ],
)
def test_release_decisions_validate(row: dict[str, Any]) -> None:
    decision = ReleaseDecision.model_validate(row)
    assert decision.outcome in set(ReleaseOutcome)
    assert (decision.reason is not None) == (decision.outcome is ReleaseOutcome.REFUSED)


def test_views_ignore_fields_a_newer_console_adds() -> None:
    now = datetime.now(UTC).isoformat()
    view = ConsoleSettingsView.model_validate(
        {
            "quiet_window_seconds": 300,
            "stale_after_seconds": 90,
            "k8s_sync_interval_seconds": 300,
            "rotation_timeout_seconds": 15,
            "added_later": now,
        }
    )
    assert view.quiet_window_seconds == 300
