"""PROXIMA_* variables: one line for a bad value, a warning for a misspelt name."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from itertools import permutations

import pytest
from pydantic import ValidationError

from agent.settings import AgentSettings
from console.core.settings import ConsoleSettings
from contracts.settings_env import (
    OTHER_PROGRAMS_SETTINGS,
    describe_invalid,
    misspelt,
    variable_names,
)
from flows.settings import FlowSettings

PROGRAMS = {"console": ConsoleSettings, "agent": AgentSettings, "flows": FlowSettings}


def test_a_misspelt_variable_is_found_with_the_setting_it_means():
    known = variable_names(ConsoleSettings)
    assert "PROXIMA_NATS_PORT" in known
    env = {"PROXIMA_NATS_PROT": "1", "PROXIMA_NATS_PORT": "2", "HOME": "/", "PROXIMA_ZZZ": "x"}
    assert misspelt(env, known) == [("PROXIMA_NATS_PROT", "PROXIMA_NATS_PORT")]


@pytest.mark.parametrize(("reader", "other"), list(permutations(PROGRAMS, 2)))
def test_no_programs_own_variables_look_misspelt_to_another(reader: str, other: str):
    """One shell often configures the Console, an agent and a worker: none warns about the
    others' settings."""
    env = dict.fromkeys(variable_names(PROGRAMS[other]), "")
    assert misspelt(env, variable_names(PROGRAMS[reader])) == []


def test_the_exceptions_are_exactly_the_colliding_names():
    colliding = set()
    for reader, other in permutations(PROGRAMS, 2):
        mine, theirs = variable_names(PROGRAMS[reader]), variable_names(PROGRAMS[other])
        for name in theirs - mine:
            if difflib.get_close_matches(name, sorted(mine), n=1, cutoff=0.88):
                colliding.add(name)
    assert colliding == OTHER_PROGRAMS_SETTINGS


def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROXIMA_PORT", "abc")
    with pytest.raises(ValidationError) as info:
        ConsoleSettings()
    line = describe_invalid(info.value)
    assert "\n" not in line
    assert line.startswith("PROXIMA_PORT='abc': Input should be a valid integer")


def _console(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_console_cli_says_one_line_for_a_bad_setting_and_warns_on_a_misspelt_one(tmp_path):
    bad = _console("serve", PROXIMA_PORT="abc", PROXIMA_DATA_DIR=str(tmp_path))
    assert bad.returncode == 2  # configuration (contracts.cli_errors' table)
    assert bad.stderr.strip().splitlines() == [
        "proxima-console: error: invalid settings: PROXIMA_PORT='abc': Input should be a valid "
        "integer, unable to parse string as an integer"
    ]
    warned = _console(
        "migrate",
        PROXIMA_DATA_DIR=str(tmp_path),
        PROXIMA_IDENTITY_QUIET_SECOND="60",
    )
    assert warned.returncode == 0, warned.stderr
    assert (
        "proxima-console: warning: PROXIMA_IDENTITY_QUIET_SECOND is not a setting of "
        "proxima-console and is ignored; did you mean PROXIMA_IDENTITY_QUIET_SECONDS?"
    ) in warned.stderr
