"""ConsoleClient on a mock transport: it answers contracts models only, pages the agent list,
keeps a reason it does not know as text, and answers a release refusal as a decision."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.views import AgentDetailView, AgentFilter, AgentView, ReleaseDecision
from contracts.vocabulary import AgentType, ErrorReason, ReleaseOutcome
from flows.console_client import ConsoleApiError, ConsoleClient
from flows.settings import FlowSettings
from testkit.views import agent_view

SOURCE = Path(inspect.getfile(ConsoleClient))


def _client(handler) -> ConsoleClient:
    settings = FlowSettings(console_url="http://console.test", console_token="t")
    return ConsoleClient(settings, transport=httpx.MockTransport(handler))


def _agents(n: int) -> list[dict[str, Any]]:
    return [agent_view(f"ag-{i}", f"node-{i}").model_dump(mode="json") for i in range(n)]


def test_agents_pages_through_the_list_and_answers_views():
    everyone = _agents(3)
    seen: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        seen.append(params)
        offset = int(params["offset"])
        items = everyone[offset : offset + 2]  # a Console that caps the page at 2
        return httpx.Response(200, json={"items": items, "total": 3, "limit": 2, "offset": offset})

    with _client(handler) as console:
        agents = console.agents(AgentFilter(agent_type=AgentType.HOST, name="node"))
    assert [a.id for a in agents] == ["ag-0", "ag-1", "ag-2"]
    assert all(isinstance(a, AgentView) for a in agents)
    assert [p["offset"] for p in seen] == ["0", "2"]
    assert seen[0]["agent_type"] == "host" and seen[0]["name"] == "node"
    assert "status" not in seen[0]


def test_agents_reads_past_a_capped_total_to_the_end():
    everyone = _agents(5)

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        items = everyone[offset : offset + 2]
        body = {"items": items, "total": 2, "total_capped": True, "limit": 2, "offset": offset}
        return httpx.Response(200, json=body)

    with _client(handler) as console:
        assert [a.id for a in console.agents()] == [f"ag-{i}" for i in range(5)]


def test_agent_answers_the_detail_view():
    body = {**_agents(1)[0], "evidence": [], "history": [], "last_metrics": None}
    with _client(lambda r: httpx.Response(200, json=body)) as console:
        assert isinstance(console.agent("ag-0"), AgentDetailView)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("agent_not_found", ErrorReason.AGENT_NOT_FOUND), ("added_later", "added_later")],
)
def test_an_error_carries_its_reason_and_keeps_an_unknown_one_as_text(reason, expected):
    answer = httpx.Response(404, json={"reason": reason, "message": "no"})
    with _client(lambda r: answer) as console, pytest.raises(ConsoleApiError) as err:
        console.agent("x")
    assert (err.value.status, err.value.reason, err.value.message) == (404, expected, "no")
    assert type(err.value.reason) is type(expected)


def test_an_error_without_a_json_body_is_still_an_error():
    with (
        _client(lambda r: httpx.Response(502, text="bad gateway")) as console,
        pytest.raises(ConsoleApiError) as err,
    ):
        console.clusters()
    assert (err.value.status, err.value.reason) == (502, "error")


def test_release_identity_asks_the_consoles_dry_run_and_answers_a_refusal_as_a_decision():
    asked: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        return httpx.Response(
            409, json={"reason": "agent_recently_seen", "message": "seen 3 s ago"}
        )

    with _client(handler) as console:
        answer = console.release_identity("ag-1", dry_run=True)
    assert asked[0].params["dry_run"] == "true"
    assert answer == ReleaseDecision(
        agent_id="ag-1",
        outcome=ReleaseOutcome.REFUSED,
        reason=ErrorReason.AGENT_RECENTLY_SEEN,
        message="seen 3 s ago",
        dry_run=True,
    )


@pytest.mark.parametrize(
    ("body", "dry_run", "outcome"),
    [
        (agent_view("ag-1", "n", status="released").model_dump(mode="json"), True, "would_release"),
        (agent_view("ag-1", "n", status="released").model_dump(mode="json"), False, "released"),
        (
            {"agent_id": "ag-1", "outcome": "already_released", "dry_run": True},
            True,
            "already_released",
        ),
    ],
)
def test_release_identity_reads_the_record_or_the_decision(body, dry_run, outcome):
    with _client(lambda r: httpx.Response(200, json=body)) as console:
        answer = console.release_identity("ag-1", dry_run=dry_run)
    assert (answer.agent_id, answer.outcome) == ("ag-1", outcome)


def test_release_identity_raises_what_is_not_a_release_refusal():
    answer = httpx.Response(403, json={"reason": "missing_scope", "message": "agents:write"})
    with _client(lambda r: answer) as console, pytest.raises(ConsoleApiError) as err:
        console.release_identity("ag-1")
    assert err.value.reason is ErrorReason.MISSING_SCOPE


def _public_signatures() -> list[tuple[str, str]]:
    """(method, annotation source) for every parameter and return of ConsoleClient's public
    methods."""
    tree = ast.parse(SOURCE.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ConsoleClient"]
    found = []
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        args = [*fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg]
        annotations = [a.annotation for a in args if a is not None and a.annotation is not None]
        if fn.returns is not None:
            annotations.append(fn.returns)
        found += [(fn.name, ast.unparse(a)) for a in annotations]
    return found


def test_no_console_json_crosses_the_client_as_a_dict():
    signatures = _public_signatures()
    methods = {name for name, _ in signatures}
    assert {"agents", "agent", "clusters", "cluster", "settings", "onboarding"} <= methods
    loose = [(name, a) for name, a in signatures if "dict" in a or "Any" in a or a == "object"]
    assert loose == [], "ConsoleClient must answer contracts models, not JSON"


@pytest.mark.parametrize(
    "body",
    [
        {
            "quiet_window_seconds": 300,
            "stale_after_seconds": 90,
            "k8s_sync_interval_seconds": 300,
            "rotation_timeout_seconds": 15,
        },
        {  # the setting names a Console may publish instead
            "identity_quiet_seconds": 300,
            "agent_stale_seconds": 90,
            "rotation_timeout_seconds": 15,
            "enroll_clock_skew_seconds": 300,
            "k8s_sync_interval": "5m",
            "k8s_sync_interval_seconds": 300,
            "rollout_sweep_seconds": 2,
        },
    ],
)
def test_settings_answers_the_consoles_windows(body):
    with _client(lambda r: httpx.Response(200, json=body)) as console:
        view = console.settings()
    assert (view.quiet_window_seconds, view.stale_after_seconds) == (300, 90)
