"""The real program in a subprocess, configured the way the Helm chart configures it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.state import StateStore
from testkit.agent_state import make_state, write_state
from testkit.agents import AgentProcess, agent_env, run_cli
from testkit.fake_console import FakeConsole
from testkit.nats import NatsServer
from testkit.net import free_port
from testkit.waiting import wait_for

TOKEN = "itk_process_test_token"


def chart_env(console: FakeConsole, data_dir: Path, **extra: str) -> dict[str, str]:
    """Environment as the chart's DaemonSet sets it, reserved variables included."""
    token_file = data_dir.parent / "token"
    token_file.write_text(TOKEN)
    values = {
        "PROXIMA_AGENT_TYPE": "k8s-node-monitor",
        "PROXIMA_AGENT_NAME": "worker-1",
        "PROXIMA_BACKEND_URL": console.url,
        "PROXIMA_INSTALL_TOKEN_FILE": str(token_file),
        "PROXIMA_HEARTBEAT_INTERVAL": "200ms",
        "PROXIMA_METRICS_INTERVAL": "300ms",
        "PROXIMA_HOST_METRICS": "true",
        "PROXIMA_LOG_LEVEL": "info",
        "PROXIMA_ENROLL_BACKOFF_MAX": "100ms",
        "PROXIMA_NATS_RECONNECT_WAIT": "50ms",
        "PROXIMA_NATS_RECONNECT_MAX_WAIT": "200ms",
        "PROXIMA_CLUSTER_NAME": "prod",
        "PROXIMA_KUBELET_URL": "https://127.0.0.1:10250",
        "PROXIMA_KUBELET_INSECURE_SKIP_VERIFY": "true",
        "PROXIMA_HOST_PROC": "/proc",
    }
    values.update(extra)
    return agent_env(**values)


def test_enrolls_connects_heartbeats_and_keeps_its_identity_across_restarts(
    tmp_path: Path,
    nats_server: NatsServer,
    fake_console: FakeConsole,
    agent_processes: list[AgentProcess],
) -> None:
    fake_console.nats = nats_server
    data_dir = tmp_path / "data"
    env = chart_env(fake_console, data_dir)
    agent = AgentProcess(data_dir, env=env).start()
    agent_processes.append(agent)

    line = agent.wait_for_log("enrolled as agent")
    state = StateStore(data_dir).read()
    assert state is not None
    assert state.agent_id in line
    agent.wait_for_log("nats connected to")
    wait_for(lambda: agent.get("/connectedz") == (200, "ok"), what="enrolled and connected")
    assert agent.get("/readyz") == (200, "ok")
    assert agent.get("/livez") == (200, "ok")
    request = fake_console.requests[0]
    assert request["agent_type"] == "k8s-node-monitor"
    assert request["name"] == "worker-1"
    assert request["install_token"] == TOKEN
    assert request["can_self_update"] is False  # Kubernetes agents are upgraded by helm
    assert agent.stop() == 0
    assert "proxima-agent stopped" in agent.log()
    assert TOKEN not in agent.log()
    assert state.seed.get_secret_value() not in agent.log()

    again = AgentProcess(data_dir, env=env).start()
    agent_processes.append(again)
    again.wait_for_log(f"already enrolled as agent {state.agent_id}")
    again.wait_for_log("nats connected to")
    assert len(fake_console.requests) == 1, "a restart must not enroll again"
    assert StateStore(data_dir).read() == state


def test_stays_ready_through_409s_saying_why_then_enrolls(
    tmp_path: Path,
    nats_server: NatsServer,
    fake_console: FakeConsole,
    agent_processes: list[AgentProcess],
) -> None:
    fake_console.nats = nats_server
    conflict = (
        409,
        {"reason": "name_in_use", "message": "worker-1 is taken", "agent_id": "ag_old"},
    )
    fake_console.enroll_answers = [conflict] * 10 + [lambda body: (201, fake_console.success(body))]
    data_dir = tmp_path / "data"
    agent = AgentProcess(data_dir, env=chart_env(fake_console, data_dir)).start()
    agent_processes.append(agent)

    # The answer list runs out only after 10 conflicts: meanwhile /connectedz names the 409
    # and the pod stays Ready (a refusal must not hold a DaemonSet rollout).
    _, reason = wait_for(
        lambda: (r := agent.get("/connectedz"))[0] == 503 and "409" in r[1] and r,
        what="503 naming the 409",
    )
    assert reason == "not enrolled: 409 name_in_use"
    assert agent.get("/readyz") == (200, "ok")
    agent.wait_for_log("enrolled as agent")
    wait_for(lambda: agent.get("/connectedz") == (200, "ok"), what="connected after enrollment")
    refusals = [line for line in agent.lines() if "409 name_in_use" in line]
    assert 0 < len(refusals) <= 4, refusals


def test_connection_refused_is_logged_with_what_to_check(
    tmp_path: Path, fake_console: FakeConsole, agent_processes: list[AgentProcess]
) -> None:
    data_dir = tmp_path / "data"
    url = f"http://127.0.0.1:{free_port()}"
    env = chart_env(
        fake_console,
        data_dir,
        PROXIMA_BACKEND_URL=url,
        PROXIMA_LOG_FORMAT="json",
        PROXIMA_LOG_LEVEL="warning",
    )
    agent = AgentProcess(data_dir, env=env).start()
    agent_processes.append(agent)
    agent.wait_for_log(
        f"connection refused to backend {url}: check backendUrl and cluster egress rules"
    )
    assert agent.get("/connectedz") == (
        503,
        f"not enrolled: connection refused to backend {url}",
    )
    assert agent.get("/readyz") == (200, "ok"), "a Console outage is no reason to be unready"
    assert agent.stop() == 0, "SIGTERM while enrolling is a clean stop"
    records: list[dict[str, Any]] = [json.loads(line) for line in agent.lines()]
    assert {"ts", "level", "logger", "msg"} <= set(records[0])
    assert {r["level"] for r in records} <= {"warning", "error"}, "log level not honoured"
    assert not (data_dir / "state.json").exists()


def test_a_taken_health_port_is_a_one_line_failure(tmp_path: Path) -> None:
    import socket

    write_state(tmp_path, make_state())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("run", "--data-dir", str(tmp_path), "--health-port", str(port))
    assert result.returncode == 5
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"proxima-agent: error: health server cannot listen on 127.0.0.1:{port}")


def test_two_processes_on_one_data_directory_are_warned_about(
    tmp_path: Path,
    nats_server: NatsServer,
    fake_console: FakeConsole,
    agent_processes: list[AgentProcess],
) -> None:
    fake_console.nats = nats_server
    data_dir = tmp_path / "data"
    env = chart_env(fake_console, data_dir)
    first = AgentProcess(data_dir, env=env).start()
    agent_processes.append(first)
    first.wait_for_log("nats connected to")
    second = AgentProcess(data_dir, env=env).start()
    agent_processes.append(second)
    second.wait_for_log("another agent process is using data directory")


def test_an_agent_that_just_enrolled_stays_under_50_mib(
    tmp_path: Path,
    nats_server: NatsServer,
    fake_console: FakeConsole,
    agent_processes: list[AgentProcess],
) -> None:
    """Regression: httpx and its TLS context stayed resident after enrollment (54 MiB, against
    42 MiB for the same agent restarted). Enrollment now goes through urllib."""
    import psutil

    fake_console.nats = nats_server
    data_dir = tmp_path / "data"
    env = chart_env(fake_console, data_dir, PROXIMA_AGENT_TYPE="host", PROXIMA_LOG_LEVEL="info")
    agent = AgentProcess(data_dir, env=env).start()
    agent_processes.append(agent)
    agent.wait_for_log("enrolled as agent")
    wait_for(lambda: agent.get("/connectedz") == (200, "ok"), what="connected")
    agent.wait_for_log("nats connected to")
    rss = psutil.Process(agent.process.pid).memory_info().rss / 2**20
    print(f"RSS of the agent that just enrolled: {rss:.1f} MiB")
    assert rss <= 50, f"{rss:.1f} MiB"
