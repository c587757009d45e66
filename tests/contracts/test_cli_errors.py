"""The three CLIs print errors in one shape: exactly one line
``<program>: error: <message>`` on stderr, never a usage block or a traceback, and the exit
status of one table (contracts/cli_errors.py; docs/agent.md, docs/console.md, docs/flows.md):
1 a failure or refusal, 2 usage or configuration."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"(proxima-agent|proxima-console|proxima-fleet): error: \S.*\n")


def _run(module: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], program: str) -> str:
    match = LINE.fullmatch(done.stderr)
    assert match, f"not one error line: {done.stderr!r}"
    assert match.group(1) == program
    assert "Traceback" not in done.stderr and "Usage:" not in done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("module", "program", "args"),
    [
        ("agent", "proxima-agent", ("run", "--no-such-flag")),
        ("console", "proxima-console", ("serve", "--no-such-flag")),
        ("flows.cli", "proxima-fleet", ("rollouts", "list", "--no-such-flag")),
        ("agent", "proxima-agent", ("no-such-verb",)),
        ("console", "proxima-console", ("no-such-verb",)),
        ("flows.cli", "proxima-fleet", ("no-such-verb",)),
        ("flows.cli", "proxima-fleet", ("rollouts", "list", "--limit", "many")),
    ],
)
def test_a_usage_error_is_one_line_and_exit_status_2(module, program, args, tmp_path):
    done = _run(module, *args, PROXIMA_DATA_DIR=str(tmp_path))
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done, program)
    assert f"(see {program}" in line and "--help)" in line


def test_a_bad_setting_is_one_line_and_exit_status_2(tmp_path):
    console = _run("console", "migrate", PROXIMA_PORT="abc", PROXIMA_DATA_DIR=str(tmp_path))
    assert console.returncode == 2
    assert "PROXIMA_PORT='abc'" in _one_error_line(console, "proxima-console")

    agent = _run("agent", "run", "--data-dir", str(tmp_path), PROXIMA_HEALTH_PORT="abc")
    assert agent.returncode == 2
    assert "PROXIMA_HEALTH_PORT" in _one_error_line(agent, "proxima-agent")

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    fleet = subprocess.run(
        [sys.executable, "-m", "flows.cli", "audit", "run"],
        env={**env, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect")},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert fleet.returncode == 2
    assert "PREFECT_API_URL is not set" in _one_error_line(fleet, "proxima-fleet")


def test_a_failure_is_one_line_and_exit_status_1():
    """Nothing answers at the discard port: the fleet CLI's failure; the agent's
    ``status`` with no state file is its own code (6), in the same shape."""
    fleet = _run("flows.cli", "agents", "list", PROXIMA_CONSOLE_URL="http://127.0.0.1:9")
    assert fleet.returncode == 1
    _one_error_line(fleet, "proxima-fleet")
    console = _run(
        "console", "bootstrap", PROXIMA_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/x"
    )
    assert console.returncode == 1
    _one_error_line(console, "proxima-console")


def test_the_agent_keeps_its_own_codes_in_the_same_shape(tmp_path):
    done = _run("agent", "status", "--data-dir", str(tmp_path / "empty"))
    assert done.returncode == 6
    _one_error_line(done, "proxima-agent")
