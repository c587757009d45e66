"""``proxima-fleet`` against a real Console: the CLI runs in a subprocess, as an operator's
shell runs it, with PROXIMA_CONSOLE_URL / PROXIMA_CONSOLE_TOKEN in its environment."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.builds import build_agent, suite_signing_key
from testkit.console import ConsoleProcess, Identity
from testkit.rollouts import ARTIFACT, create_rollout
from testkit.swarm import Swarm
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def fleet(console: ConsoleProcess | None, *args: str, url: str | None = None):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "250",
        "PROXIMA_CONSOLE_URL": url or (console.url if console else ""),
        "PROXIMA_CONSOLE_TOKEN": console.token if console else "",
    }
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def ok(console: ConsoleProcess, *args: str) -> str:
    r = fleet(console, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def swarm(console):
    s = Swarm(console, 3, prefix="cli").start()
    wait_for(lambda: {a["status"] for a in _agents(console)} == {"online"}, what="swarm online")
    yield s
    s.stop()


def _agents(console):
    with console.client() as c:
        return c.get("/api/v1/fleet/agents", params={"limit": 1000}).json()["items"]


def test_agents_list_show_json_and_filters(console, swarm):
    listed = json.loads(ok(console, "agents", "list", "--json"))
    assert sorted(a["name"] for a in listed) == ["cli-00000", "cli-00001", "cli-00002"]
    assert {a["status"] for a in listed} == {"online"}

    table = ok(console, "agents", "list", "--status", "online", "--name", "cli-00001")
    assert "1 agents" in table and "cli-00001" in table and "cli-00000" not in table
    assert ok(console, "agents", "list", "--status", "offline", "--json").strip() == "[]"

    agent = next(a for a in listed if a["name"] == "cli-00002")
    detail = json.loads(ok(console, "agents", "show", agent["id"], "--json"))
    assert (detail["id"], detail["name"]) == (agent["id"], "cli-00002")
    assert "history" in detail and "evidence" in detail
    shown = ok(console, "agents", "show", agent["id"])
    assert "agent cli-00002" in shown and agent["id"] in shown and "history" in shown


# Long enough that starting the CLI (Python, Prefect's imports) on a loaded machine stays inside
# it: with the suite's 1.5 s the first call could already land past the window.
RELEASE_QUIET_SECONDS = 8


def test_release_dry_run_answers_and_changes_nothing(console_factory, database_url):
    console = console_factory(
        database_url=database_url,
        env={
            "PROXIMA_IDENTITY_QUIET_SECONDS": str(RELEASE_QUIET_SECONDS),
            "PROXIMA_AGENT_STALE_SECONDS": str(RELEASE_QUIET_SECONDS),
        },
    )
    identity = Identity("quiet-host")
    r = identity.enroll(console, console.install_token())
    assert r.status_code in (200, 201), r.text
    agent_id = r.json()["agent_id"]

    # Enrolled just now: seen within the quiet window, so release is refused (exit 1).
    refused = fleet(console, "agents", "release", agent_id, "--dry-run")
    assert refused.returncode == 1
    assert refused.stderr.startswith("proxima-fleet: error: agent_recently_seen: ")

    # Past the quiet window the dry run says it would release, and changes nothing.
    def would() -> dict | None:
        r = fleet(console, "agents", "release", agent_id, "--dry-run", "--json")
        return json.loads(r.stdout) if r.returncode == 0 else None

    decision = wait_for(would, timeout=60, interval=0.5, what="quiet window over")
    assert (decision["outcome"], decision["dry_run"]) == ("would_release", True)
    assert console.agent(agent_id)["released_at"] is None
    assert "dry run: nothing changed" in ok(console, "agents", "release", agent_id, "--dry-run")


def test_rollouts_create_list_show_watch_and_abort(console, swarm):
    created = json.loads(
        ok(
            console,
            "rollouts",
            "create",
            "--json",
            "--name",
            "cli-rollout",
            "--version",
            ARTIFACT["version"],
            "--url",
            ARTIFACT["url"],
            "--sha256",
            ARTIFACT["sha256"],
            "--signature",
            ARTIFACT["signature"],
            "--canary-size",
            "1",
            "--waves",
            "50,100",
            "--threshold-count",
            "2",
            "--action",
            "abort",
            "--no-start-flow",
        )
    )
    rid = created["id"]
    assert created["state"] == "pending" and created["target_version"] == "0.9.0"
    assert sum(w["size"] for w in created["waves"]) == 3
    assert created["criteria"][0]["threshold_count"] == 2
    assert created["criteria"][0]["action"] == "abort"

    assert [r["id"] for r in json.loads(ok(console, "rollouts", "list", "--json"))] == [rid]
    assert rid in ok(console, "rollouts", "list") and "cli-rollout" in ok(
        console, "rollouts", "list"
    )
    shown = json.loads(ok(console, "rollouts", "show", rid, "--json"))
    assert shown["id"] == rid and len(shown["targets"]) == 3
    table = ok(console, "rollouts", "show", rid)
    assert "waves" in table and "any failures >= 2 (after 1 results): abort" in table

    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    env |= {"PROXIMA_CONSOLE_URL": console.url, "PROXIMA_CONSOLE_TOKEN": console.token}
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "rollouts",
            "show",
            rid,
            "--watch",
            "--interval",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        aborted = ok(console, "rollouts", "abort", rid, "--reason", "wrong build")
        assert f"rollout {rid} (cli-rollout): aborted" in aborted
        out, err = watcher.communicate(timeout=60)  # the live view ends once the rollout is final
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    assert "aborted" in out and "wrong build" in out

    again = fleet(console, "rollouts", "pause", rid)
    assert again.returncode == 1
    assert again.stderr.startswith("proxima-fleet: error: ")
    assert len(again.stderr.strip().splitlines()) == 1


def test_builds_list_upload_refusal_and_error_lines(console, tmp_path):
    assert ok(console, "builds", "list", "--json").strip() == "[]"
    assert "0 builds" in ok(console, "builds", "list")

    junk = tmp_path / "agent.pyz"
    junk.write_bytes(b"not a build")
    refused = fleet(console, "builds", "upload", str(junk), "--version", "0.9.0",
                    "--signature", "s" * 86)  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.startswith("proxima-fleet: error: ")
    assert len(refused.stderr.strip().splitlines()) == 1

    missing = fleet(console, "agents", "show", "no-such-agent")
    assert missing.returncode == 1
    assert missing.stderr.startswith("proxima-fleet: error: agent_not_found: ")

    no_audit = fleet(console, "audit", "show")
    assert no_audit.returncode == 1
    assert no_audit.stderr.startswith("proxima-fleet: error: no_audit: ")

    no_version = fleet(console, "rollouts", "create", "--version", "7.7.7")
    assert no_version.returncode == 1
    assert "hosts no build of 7.7.7" in no_version.stderr


def test_an_unreachable_console_is_one_line_naming_the_url():
    url = "http://127.0.0.1:9"  # discard port: nothing listens
    r = fleet(None, "rollouts", "list", url=url)
    assert r.returncode == 1
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith("proxima-fleet: error: connection refused: ")
    assert url in line and "PROXIMA_CONSOLE_URL" in line


def test_builds_upload_of_a_signed_build_is_hosted_and_listed(console, tmp_path):
    key, _ = suite_signing_key(tmp_path / "keys")
    build = build_agent("0.9.0", tmp_path / "dist", key=key)
    assert build.signature
    uploaded = ok(console, "builds", "upload", str(build.path), "--version", "0.9.0",
                  "--signature", build.signature)  # fmt: skip
    assert uploaded.startswith("build 0.9.0: ") and build.sha256 in uploaded
    (hosted,) = json.loads(ok(console, "builds", "list", "--json"))
    assert (hosted["version"], hosted["sha256"]) == ("0.9.0", build.sha256)


def test_agents_rotate_then_revoke_a_real_agent(console, agents):
    a = agents(console, "cli-rot", console.install_token())
    a.wait_ready()
    agent_id = a.agent_id()
    wait_for(lambda: console.agent(agent_id)["status"] == "online", what="online")
    state_before = json.dumps(a.state(), sort_keys=True)

    rotated = json.loads(ok(console, "agents", "rotate", agent_id, "--json"))
    assert rotated["agent_id"] == agent_id and rotated["public_key"]
    wait_for(
        lambda: (
            json.dumps(a.state(), sort_keys=True) != state_before
            and not a.state().get("pending_seed")
        ),
        what="the agent promoted its new key",
    )
    assert console.agent(agent_id)["credentials_rotated_at"]
    a.wait_ready()
    wait_for(lambda: console.agent(agent_id)["status"] == "online", what="online on the new key")
    again = ok(console, "agents", "rotate", agent_id)
    assert again.startswith(f"agent {agent_id}: new key ") and rotated["public_key"] not in again

    revoked = ok(console, "agents", "revoke", agent_id)
    assert revoked.startswith(f"agent {agent_id} (cli-rot): revoked at ")
    assert console.agent(agent_id)["status"] == "revoked"
    shown = json.loads(ok(console, "agents", "show", agent_id, "--json"))
    assert shown["revoked_at"]

    # A revoked identity is never rotated: one refusal line.
    refused = fleet(console, "agents", "rotate", agent_id)
    assert refused.returncode == 1
    assert refused.stderr.startswith("proxima-fleet: error: ")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_clusters_list_and_show(console):
    with console.client() as c:
        r = c.post("/api/v1/clusters", json={"name": "Prod EU"})
        assert r.status_code == 201, r.text
    slug = r.json()["slug"]
    (listed,) = json.loads(ok(console, "clusters", "list", "--json"))
    assert (listed["slug"], listed["name"], listed["registered"]) == (slug, "Prod EU", True)
    table = ok(console, "clusters", "list")
    assert "1 clusters" in table and slug in table
    shown = ok(console, "clusters", "show", slug)
    assert "cluster Prod EU" in shown and "collectors" in shown and "warnings" in shown
    assert json.loads(ok(console, "clusters", "show", slug, "--json"))["id"] == listed["id"]

    missing = fleet(console, "clusters", "show", "nowhere")
    assert missing.returncode == 1
    assert missing.stderr.startswith("proxima-fleet: error: cluster_not_found: ")


def test_restart_driver_refusal_is_one_line(console, swarm):
    """Success and ``driver_running`` need Prefect: tests/flows/test_fleet_audit_run.py."""
    r = create_rollout(console, "cli-driver")
    refused = fleet(console, "rollouts", "restart-driver", r["id"])
    assert refused.returncode == 1
    assert refused.stderr.startswith("proxima-fleet: error: prefect_not_configured: ")
    assert len(refused.stderr.strip().splitlines()) == 1
