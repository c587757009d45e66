"""The embedded nats-server is supervised (docs/console.md): it dies with the Console, a server
left by an earlier run is cleaned up, a dead one is started again, and revocation keeps working
after the restart (the Console pushes every account again when its system connection
reconnects). A real Console, its real nats-server and a real agent."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from console.nats.server import nats_server_binary
from testkit.agents import AgentProcess, fake_host_root
from testkit.console import ConsoleProcess
from testkit.waiting import wait_for


def _pid_file(console: ConsoleProcess) -> Path:
    return console.data_dir / "nats" / "nats-server.pid"


def _server_pid(console: ConsoleProcess) -> int:
    return int(_pid_file(console).read_text().strip())


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _seen_after(console: ConsoleProcess, agent_id: str, after: str) -> bool:
    seen = console.agent(agent_id)["last_seen_at"]
    return bool(seen) and seen > after


def test_a_killed_nats_server_is_restarted_agents_reconnect_and_revocation_still_cuts(
    console_factory, tmp_path
):
    console = console_factory()
    token = console.install_token()
    agent = AgentProcess(
        tmp_path / "web-1",
        backend_url=console.url,
        install_token=token,
        host_root=fake_host_root(tmp_path / "root-1", machine_id="m-sup-1"),
    ).start()
    try:
        agent_id = agent.agent_id()
        agent.wait_ready()
        old = _server_pid(console)
        killed_at = time.monotonic()
        os.kill(old, signal.SIGKILL)
        new = wait_for(
            lambda: (pid := _server_pid(console)) != old and _alive(pid) and pid,
            20,
            "a new nats-server",
        )
        restarted = time.monotonic() - killed_at
        mark = console.agent(agent_id)["last_seen_at"]
        wait_for(lambda: _seen_after(console, agent_id, mark), 30, "the agent's heartbeat again")
        reconnected = time.monotonic() - killed_at
        print(f"\nnats-server restarted in {restarted:.2f} s; agent back in {reconnected:.2f} s")
        log = console.log_path.read_text()
        assert log.count("restarting it") == 1  # logged once, not a traceback loop
        wait_for(
            lambda: "pushing every account again" in console.log_path.read_text(),
            10,
            "the accounts pushed again after the reconnect",
        )
        # Revocation after the restart still cuts the live agent.
        with console.client() as c:
            started = time.monotonic()
            assert c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").status_code == 200
        wait_for(lambda: "retired" in agent.connectedz()[1], 20, "the revoked agent retired")
        print(f"revoke → agent retired in {time.monotonic() - started:.2f} s")
        assert _server_pid(console) == new
    finally:
        agent.stop()


def test_a_sigkilled_console_leaves_no_nats_server_and_starts_again_cleanly(console_factory):
    console = console_factory()
    pid = _server_pid(console)
    assert _alive(pid)
    assert console.process is not None
    console.process.kill()
    console.process.wait()
    wait_for(lambda: not _alive(pid), 10, f"nats-server {pid} gone with its Console")
    console.start()  # same data directory and NATS port, no manual cleanup
    assert _alive(_server_pid(console))


def test_a_server_left_by_an_earlier_run_is_stopped_before_the_next_start(console_factory):
    console = console_factory()
    config = console.data_dir / "nats" / "nats-server.conf"
    console.stop()
    # As if an older Console had been killed without its child: a server running our config,
    # holding the port, its pid recorded.
    orphan = subprocess.Popen(
        [nats_server_binary(), "-c", str(config)],
        cwd=config.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _pid_file(console).write_text(f"{orphan.pid}\n")
        ports = config.parent / "ports" / f"{Path(nats_server_binary()).name}_{orphan.pid}.ports"
        wait_for(ports.exists, 10, "the orphan listening")
        console.start()
        assert orphan.wait(10) is not None  # stopped by the new Console
        assert _server_pid(console) != orphan.pid
        assert "left by an earlier run" in console.log_path.read_text()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
