"""state.json: atomic, private, never logged, never replaced behind the operator's back."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agent.errors import (
    StateConflictError,
    StateCorruptError,
    StateTypeMismatchError,
    StateVersionError,
)
from agent.files import write_atomic
from agent.state import StateStore
from contracts.vocabulary import AgentType
from testkit.agent_state import make_state, write_state
from testkit.agents import agent_env, run_cli


def test_state_file_is_written_with_mode_0600_and_no_temp_files(tmp_path: Path) -> None:
    state = make_state()
    path = write_state(tmp_path, state)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    loaded = StateStore(tmp_path).load(expected_type=AgentType.HOST)
    assert loaded == state
    assert json.loads(path.read_text())["seed"] == state.seed.get_secret_value()


def test_repr_and_default_dump_hide_the_seed(tmp_path: Path) -> None:
    state = make_state()
    secret = state.seed.get_secret_value()
    assert secret not in repr(state)
    assert secret not in str(state.model_dump())
    assert secret not in state.model_dump_json()
    assert secret not in json.dumps(state.public_view())


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """A crash mid-write must leave either the old or the new content, never a torn file."""
    target = tmp_path / "state.json"
    write_atomic(target, b"old")

    class Boom(Exception):
        pass

    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise Boom

    os.fsync = failing_fsync  # type: ignore[assignment]
    try:
        with pytest.raises(Boom):
            write_atomic(target, b"new content")
    finally:
        os.fsync = real_fsync
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_create_never_clobbers_a_state_file_that_appeared(tmp_path: Path) -> None:
    first = make_state()
    write_state(tmp_path, first)
    with pytest.raises(StateConflictError):
        StateStore(tmp_path).create(make_state())
    assert StateStore(tmp_path).read() == first


def test_type_mismatch_is_refused_and_names_both_types_and_the_path(tmp_path: Path) -> None:
    path = write_state(tmp_path, make_state(agent_type=AgentType.HOST))
    with pytest.raises(StateTypeMismatchError) as info:
        StateStore(tmp_path).load(expected_type=AgentType.K8S_NODE_MONITOR)
    message = str(info.value)
    assert f"state file {path} belongs to a host agent" in message
    assert "configured as k8s-node-monitor; refusing to start" in message
    assert "The file is left in place" in message


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b"[]", b'{"agent_id": "x"}', b'{"agent_type": "host", "seed": "nope"}'],
)
def test_corrupt_state_is_a_clear_error_naming_the_path(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(StateCorruptError) as info:
        StateStore(tmp_path).read()
    assert str(tmp_path / "state.json") in str(info.value)


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"agent_id": "x"}'])
def test_loading_a_corrupt_state_sets_it_aside_so_the_agent_enrolls(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "state.json").write_bytes(content)
    (tmp_path / "state.json.corrupt-1").write_bytes(b"an earlier one")
    assert StateStore(tmp_path).load(expected_type=AgentType.HOST) is None
    asides = sorted(p.name for p in tmp_path.iterdir() if p.name != "state.json.corrupt-1")
    assert len(asides) == 1 and asides[0].startswith("state.json.corrupt-"), asides
    assert (tmp_path / asides[0]).read_bytes() == content
    assert (tmp_path / "state.json.corrupt-1").read_bytes() == b"an earlier one"
    assert "is corrupt" in caplog.text and "enrolling again" in caplog.text


def test_corrupt_state_errors_never_echo_the_seed(tmp_path: Path) -> None:
    state = make_state()
    data = json.loads(state.file_content())
    del data["agent_id"]
    (tmp_path / "state.json").write_text(json.dumps(data))
    with pytest.raises(StateCorruptError) as info:
        StateStore(tmp_path).read()
    assert state.seed.get_secret_value() not in str(info.value)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    data = json.loads(make_state().file_content())
    data["schema_version"] = 99
    (tmp_path / "state.json").write_text(json.dumps(data))
    with pytest.raises(StateVersionError):
        StateStore(tmp_path).load(expected_type=AgentType.HOST)


def test_loose_permissions_are_tightened(tmp_path: Path) -> None:
    path = write_state(tmp_path, make_state())
    path.chmod(0o644)
    StateStore(tmp_path).load(expected_type=AgentType.HOST)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- the real CLI ---------------------------------------------------------------------------


def _snapshot(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ino


def test_cli_refuses_a_state_file_of_another_agent_type_and_leaves_it(tmp_path: Path) -> None:
    """The chart page's shared-data-directory story: a DaemonSet pod finds the host agent's file."""
    path = write_state(tmp_path, make_state(agent_type=AgentType.HOST))
    before = _snapshot(path)
    result = run_cli(
        "run",
        "--agent-type",
        "k8s-node-monitor",
        "--data-dir",
        str(tmp_path),
        "--backend-url",
        "http://127.0.0.1:9",
        "--health-port",
        "0",
    )
    assert result.returncode == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"proxima-agent: error: state file {path} belongs to a host agent but this agent is "
        "configured as k8s-node-monitor; refusing to start. The file is left in place: on a "
        "shared data directory it belongs to the other agent."
    )
    assert _snapshot(path) == before
    assert not (tmp_path / "health.port").exists()


def test_a_misspelt_variable_is_named_in_a_warning(tmp_path: Path) -> None:
    write_state(tmp_path, make_state(agent_type=AgentType.HOST))
    env = {**agent_env(), "PROXIMA_HEARTBEAT_INTERVALL": "5s"}
    result = run_cli(
        "run", "--agent-type", "k8s-node-monitor", "--data-dir", str(tmp_path),
        "--backend-url", "http://127.0.0.1:9", "--health-port", "0", env=env,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert (
        "PROXIMA_HEARTBEAT_INTERVALL is not a setting of proxima-agent and is ignored; did you "
        "mean PROXIMA_HEARTBEAT_INTERVAL?"
    ) in result.stderr


def test_cli_reports_an_unreadable_state_file(tmp_path: Path) -> None:
    (tmp_path / "state.json").mkdir()
    result = run_cli("status", "--data-dir", str(tmp_path))
    assert result.returncode == 3
    assert f"state file {tmp_path / 'state.json'} cannot be read" in result.stderr


def test_status_json_prints_identity_but_never_the_seed(tmp_path: Path) -> None:
    state = make_state(pending_seed=None)
    write_state(tmp_path, state)
    result = run_cli("status", "--data-dir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["agent_id"] == state.agent_id
    assert view["agent_type"] == "host"
    assert view["public_key"] == state.public_key
    assert view["state_file"] == str(tmp_path / "state.json")
    assert view["rotation_pending"] is False
    assert state.seed.get_secret_value() not in result.stdout + result.stderr
    plain = run_cli("status", "--data-dir", str(tmp_path))
    assert plain.returncode == 0
    assert state.agent_id in plain.stdout
    assert state.seed.get_secret_value() not in plain.stdout


def test_status_without_state_exits_non_zero(tmp_path: Path) -> None:
    result = run_cli("status", "--data-dir", str(tmp_path))
    assert result.returncode == 6
    assert result.stderr.strip() == (
        f"proxima-agent: error: no state file at {tmp_path / 'state.json'}: "
        "this agent has not enrolled yet"
    )


def test_run_without_token_or_backend_fails_with_one_line(tmp_path: Path) -> None:
    result = run_cli("run", "--data-dir", str(tmp_path), "--health-port", "0")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "install token is required" in result.stderr
    assert not (tmp_path / "state.json").exists()


def test_version_prints_the_contract_version() -> None:
    result = run_cli("version")
    assert result.returncode == 0
    assert result.stdout.strip() == "proxima-agent 0.8.0"
