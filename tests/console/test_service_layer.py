"""The Console's adapters stay thin: routes and pages call services, which own the sessions,
the thread hops and the rules. A regression here is a use case creeping back into a route."""

import re
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "console"
ADAPTERS = sorted([*CONSOLE.glob("api/routes/*.py"), *CONSOLE.glob("web/routes/*.py")])


def _calls(name: str) -> set[str]:
    """The modules that call ``name`` (its definition is not a call)."""
    pattern = re.compile(rf"(?<!def )\b{re.escape(name)}\(")
    return {
        str(p.relative_to(CONSOLE)) for p in CONSOLE.rglob("*.py") if pattern.search(p.read_text())
    }


def test_routes_and_pages_open_no_session_and_hop_no_thread():
    assert ADAPTERS, "the route modules moved: update this test"
    for path in ADAPTERS:
        text = path.read_text()
        for needle in ("Session(", "run_in_threadpool", "to_thread", "from console.models"):
            assert needle not in text, f"{path.name}: {needle}"


def test_the_onboarding_gates_have_one_implementation_used_by_the_wizard_and_the_api():
    assert _calls("onboarding_status") == {"services/onboarding.py"}
    assert {"api/routes/clusters.py", "web/routes/clusters.py"} <= _calls("cluster_onboarding")


def test_online_and_status_have_one_definition_in_rollout_policy():
    """``rollout_policy.identities`` decides online and status; the Console only feeds it."""
    assert {
        "services/agent_records.py",
        "services/clusters.py",
        "services/identities/lifecycle.py",
        "services/rollouts/planning.py",
    } <= _calls("is_online")
    assert _calls("agent_status") == {"services/agent_records.py"}
    assert "services/presenters.py" in _calls("status")
    text = "".join(p.read_text() for p in CONSOLE.rglob("*.py"))
    assert "last_seen_at).total_seconds() <= stale" not in text
    assert "quiet_for <= quiet" not in text
    assert "rollout_policy.is_online(" in (CONSOLE / "services/agent_records.py").read_text()


def test_enrollment_and_release_decide_with_the_pure_core():
    assert _calls("decide_enrollment") == {"services/identities/enrollment.py"}
    assert _calls("decide_release") == {"services/identities/lifecycle.py"}
