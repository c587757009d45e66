"""Test kit for the agent: a real nats-server, a fake Console, agent subprocesses, waiting.

Nothing here sleeps for a fixed time: every wait polls a condition against a deadline. Test modules
import it as ``tests.agent.agent_testkit``; ``conftest.py`` only declares fixtures.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nkeys

from agent.httpclient import HttpResponse
from agent.runtime import AgentRuntime
from agent.settings import AgentSettings
from agent.state import AgentState, StateStore
from contracts import subjects
from contracts.agent_types import AgentType

ROOT = Path(__file__).resolve().parents[2]

NATS_SERVER = Path(sys.executable).with_name("nats-server")


# -- waiting --------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


async def async_wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


def answer(status: int, json_body: Any = None, *, text: str | None = None) -> HttpResponse:
    """What a fake Console transport returns: a JSON body, or plain text."""
    if text is not None:
        return HttpResponse(status, text.encode())
    return HttpResponse(
        status, json.dumps(json_body).encode(), {"content-type": "application/json"}
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- keys and state -------------------------------------------------------------------------


def new_seed() -> str:
    return str(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode())


def public_of(seed: str) -> str:
    return str(nkeys.from_seed(seed.encode()).public_key.decode())


def verify(public_key: str, message: bytes, signature: str) -> bool:
    """Check an agent's signature the way the Console must: from the public nkey alone."""
    import nacl.exceptions
    import nacl.signing

    raw = base64.b32decode(public_key)[1:-2]  # prefix byte ... crc16
    try:
        nacl.signing.VerifyKey(raw).verify(message, base64.urlsafe_b64decode(signature))
    except nacl.exceptions.BadSignatureError:
        return False
    return True


def make_state(
    *,
    nats_url: str = "nats://127.0.0.1:4222",
    agent_type: AgentType = AgentType.HOST,
    seed: str | None = None,
    pending_seed: str | None = None,
    backend_url: str = "http://127.0.0.1:9",
    name: str = "node-1",
) -> AgentState:
    return AgentState.model_validate(
        {
            "agent_id": "ag_" + uuid.uuid4().hex[:12],
            "agent_type": agent_type,
            "name": name,
            "seed": seed or new_seed(),
            "pending_seed": pending_seed,
            "nats_url": nats_url,
            "backend_url": backend_url,
            "client_id": "cl_1",
            "environment_id": "env_1",
            "enrolled_at": datetime.now(UTC),
        }
    )


def write_state(data_dir: Path, state: AgentState) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = StateStore(data_dir)
    store.create(state)
    return store.path


# -- nats-server ----------------------------------------------------------------------------


@dataclass
class NatsServer:
    """A real nats-server on a free loopback port with nkey users for agents and a test user."""

    workdir: Path
    port: int = field(default_factory=free_port)
    agents: dict[str, str] = field(default_factory=dict)  # public key -> agent id
    process: subprocess.Popen[bytes] | None = None

    TEST_USER = "test"
    TEST_PASSWORD = "test-password"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / "nats.conf"

    def _write_config(self) -> None:
        users = [f'{{user: "{self.TEST_USER}", password: "{self.TEST_PASSWORD}"}}']
        for public, agent_id in self.agents.items():
            pub = json.dumps(subjects.agent_publish_allow(agent_id))
            sub = json.dumps(subjects.agent_subscribe_allow(agent_id))
            users.append(
                f'{{nkey: "{public}", permissions: {{publish: {{allow: {pub}}}, '
                f"subscribe: {{allow: {sub}}}}}}}"
            )
        text = (
            f"listen: 127.0.0.1:{self.port}\n"
            f"ports_file_dir: {json.dumps(str(self.workdir))}\n"
            "authorization {\n  users = [\n    " + "\n    ".join(users) + "\n  ]\n}\n"
        )
        self.config_path.write_text(text)

    def allow(self, public_key: str, agent_id: str) -> None:
        self.agents[public_key] = agent_id

    def revoke(self, public_key: str) -> None:
        self.agents.pop(public_key, None)

    def start(self) -> None:
        """Start on ``port``; when another process took that free port first (the server then
        exits), pick another. Ready means *this* server wrote its ports file: a socket that
        answers on the port could belong to someone else."""
        for _attempt in range(5):
            self._write_config()
            self.process = subprocess.Popen(
                [str(NATS_SERVER), "-c", str(self.config_path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if wait_until(self._listening, 10, f"nats-server on port {self.port}") == "ours":
                return
            self.port = free_port()
        raise AssertionError("nats-server could not bind a free port in 5 attempts")

    def _listening(self) -> str | None:
        assert self.process is not None
        if self.process.poll() is not None:
            return "lost"  # the port was taken before it bound: try another
        ports = self.workdir / f"{NATS_SERVER.name}_{self.process.pid}.ports"
        return "ours" if ports.exists() else None

    def reload(self) -> None:
        """Apply the users now in ``agents``: the server cuts connections of removed keys."""
        self._write_config()
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    async def connect(self) -> Any:
        import nats

        return await nats.connect(
            self.url,
            user=self.TEST_USER,
            password=self.TEST_PASSWORD,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,
        )


# -- fake Console over HTTP -----------------------------------------------------------------


@dataclass
class FakeConsole:
    """A tiny HTTP Console. ``enroll_answers`` are consumed in order; the last one repeats.

    Each answer is ``(status, body)``, or a callable taking the request JSON and returning one.
    ``on_enrolled`` runs before a 2xx answer is sent (e.g. to authorize the key in NATS).
    """

    nats: NatsServer | None = None
    enroll_answers: list[Any] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    rotations: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def success(self, request: dict[str, Any], *, agent_id: str | None = None) -> dict[str, Any]:
        agent_id = agent_id or "ag_" + uuid.uuid4().hex[:12]
        if self.nats is not None:
            self.nats.allow(request["public_key"], agent_id)
            self.nats.reload()
        return {
            "agent_id": agent_id,
            "agent_type": request["agent_type"],
            "name": request["name"],
            "client_id": "cl_1",
            "environment_id": "env_1",
            "nats_url": self.nats.url if self.nats else "nats://127.0.0.1:9",
            "rebound": False,
        }

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path == "/api/v1/agents/enroll":
            self.requests.append(body)
            if not self.enroll_answers:
                return 201, self.success(body)
            answer = self.enroll_answers[0]
            if len(self.enroll_answers) > 1:
                self.enroll_answers.pop(0)
            status, reply = answer(body) if callable(answer) else answer
            return int(status), dict(reply)
        if path.startswith("/api/v1/agents/") and path.endswith("/credentials"):
            self.rotations.append(body)
            return 200, {}
        return 404, {"reason": "not_found", "message": path}

    def start(self) -> None:
        console = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, answer = console._answer(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


# -- builds and where agents download them --------------------------------------------------

BUILD_SCRIPT = ROOT / "scripts" / "build_agent.py"


@dataclass(frozen=True)
class Build:
    """One built zipapp, as ``scripts/build_agent.py --json`` described it."""

    version: str
    path: Path
    sha256: str
    signature: str | None

    def artifact(self, base_url: str, **overrides: Any) -> dict[str, Any]:
        """``self_update`` args for this build served from ``base_url``."""
        args: dict[str, Any] = {
            "rollout_id": "ro_test",
            "version": self.version,
            "url": f"{base_url}/{self.path.name}",
            "sha256": self.sha256,
            "signature": self.signature,
        }
        args.update(overrides)
        return args


def build_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def make_signing_key(directory: Path) -> tuple[Path, str]:
    """(private key file, public key text) made by the real ``keygen``."""
    result = build_script("keygen", "--out", str(directory), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    return Path(info["private_key_file"]), str(info["public_key"])


def build_agent(
    version: str, out: Path, *, key: Path | None, source_root: Path = ROOT, name: str | None = None
) -> Build:
    args = ["--version", version, "--out", str(out), "--source-root", str(source_root), "--json"]
    if key is not None:
        args += ["--signing-key", str(key)]
    if name is not None:
        args += ["--name", name]
    result = build_script(*args)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    return Build(version, Path(info["artifact"]), info["sha256"], info["signature"])


def patched_source(target: Path, *patches: tuple[str, str]) -> Path:
    """A copy of the agent's sources with ``(module path, code appended)`` patches: how the
    tests make a broken new build with the real build script."""
    for package in ("agent", "contracts"):
        shutil.copytree(
            ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    for module, code in patches:
        with open(target / module, "a") as handle:
            handle.write("\n\n" + code + "\n")
    return target


# A new build that hangs as soon as it starts, before it could read any update marker: as the
# agent (agent/runtime.py) and as a trial child (agent/selfupdate/trial.py).
HANG_AT_START = """
import time as _time

async def _hang(self, *, install_signal_handlers=True):
    _time.sleep(3600)

AgentRuntime.run = _hang
"""
HANG_TRIAL_AT_START = HANG_AT_START.replace("AgentRuntime.run", "TrialChild.run")

# A new build that passes its trial but, started for real, never reaches NATS.
NEVER_CONNECTS = """
import asyncio as _asyncio

_trial_run = NatsSession.run

async def _never(self):
    if self.trial:
        return await _trial_run(self)
    await _asyncio.Event().wait()

NatsSession.run = _never
"""

# A new build that passes its trial but crashes as soon as it serves for real.
CRASHES = """
async def _crash(self, state):
    raise RuntimeError("injected crash after the handover")

AgentRuntime._serve = _crash
"""


@dataclass
class Builds:
    """The builds the self_update tests install and offer, all signed with ``key``."""

    key: Path
    public_key: str
    dist: Path
    old: Build
    new: Build
    hangs: Build
    never_connects: Build
    crashes: Build


def make_builds(root: Path) -> Builds:
    key, public = make_signing_key(root / "keys")
    dist = root / "dist"
    broken = root / "src"

    def broken_build(version: str, name: str, *patches: tuple[str, str]) -> Build:
        source = patched_source(broken / name, *patches)
        return build_agent(version, dist, key=key, source_root=source)

    return Builds(
        key=key,
        public_key=public,
        dist=dist,
        old=build_agent("0.8.0", dist, key=key),
        new=build_agent("0.9.0", dist, key=key),
        hangs=broken_build(
            "0.9.1",
            "hangs",
            ("agent/runtime.py", HANG_AT_START),
            ("agent/selfupdate/trial.py", HANG_TRIAL_AT_START),
        ),
        never_connects=broken_build("0.9.2", "never", ("agent/session.py", NEVER_CONNECTS)),
        crashes=broken_build("0.9.3", "crashes", ("agent/runtime.py", CRASHES)),
    )


class ArtifactServer:
    """Serves the files of one directory over HTTP on loopback; counts downloads."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.downloads: list[str] = []
        self.redirects: dict[str, str] = {}  # "/path" -> "Location"
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path in server.redirects:
                    self.send_response(302)
                    self.send_header("location", server.redirects[self.path])
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                name = self.path.lstrip("/")
                path = server.directory / name
                if "/" in name or not path.is_file():
                    self.send_error(404, "Not Found")
                    return
                server.downloads.append(name)
                data = path.read_bytes()
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- agent subprocesses ---------------------------------------------------------------------


def agent_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXIMA_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=ROOT,
        env=env or agent_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class AgentProcess:
    """``python -m agent run …`` (or ``python <program> run …``) with its stderr collected line
    by line. ``wrapper`` goes in front of the interpreter (``unshare …``); with
    ``restart_on_failure`` a non-zero exit starts the same command again, as systemd's
    ``Restart=on-failure`` would."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        program: Path | None = None,
        wrapper: list[str] | None = None,
        restart_on_failure: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        start = [str(program)] if program is not None else ["-m", "agent"]
        self.argv = [
            *(wrapper or []),
            sys.executable,
            *start,
            "run",
            "--data-dir",
            str(data_dir),
            "--health-port",
            "0",
            *args,
        ]
        self.env = env or agent_env()
        self.restart_on_failure = restart_on_failure
        self.exits: list[int] = []
        self._stopping = False
        self.process = self._spawn()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _spawn(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _read(self) -> None:
        while True:
            process = self.process
            assert process.stderr is not None
            for line in process.stderr:
                self.lines.append(line.rstrip("\n"))
            code = process.wait()
            self.exits.append(code)
            if self._stopping or not self.restart_on_failure or code == 0:
                return
            self.lines.append(f"[testkit] agent exited with {code}: restarting it")
            self.process = self._spawn()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_log(self, text: str, timeout: float = 15.0) -> str:
        def found() -> str | None:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.process.poll() is not None and not self.restart_on_failure:
                raise AssertionError(
                    f"agent exited ({self.process.returncode}) before logging {text!r}:\n"
                    + self.output
                )
            return None

        try:
            return str(wait_until(found, timeout, f"agent log line containing {text!r}"))
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- agent log ---\n{self.output}") from None

    def health_port(self, timeout: float = 15.0) -> int:
        path = self.data_dir / "health.port"

        def read() -> int | None:
            if self.process.poll() is not None:
                raise AssertionError(f"agent exited early:\n{self.output}")
            with contextlib.suppress(OSError, ValueError):
                return int(path.read_text())
            return None

        return int(wait_until(read, timeout, "health.port"))

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.health_port(), path)

    def stop(self, timeout: float = 10.0) -> int:
        self._stopping = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(2)
        return int(self.process.returncode)


def http_get(port: int, path: str) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode().strip()
    finally:
        conn.close()


# -- in-process runtime ---------------------------------------------------------------------


class Inbox:
    """Everything published on a subject, decoded."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def handle(self, msg: Any) -> None:
        self.messages.append(json.loads(msg.data))


def settings(data_dir: Path, **overrides: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "health_port": 0,
        "heartbeat_interval": 0.2,
        "metrics_interval": 0.3,
        "nats_reconnect_wait": 0.05,
        "nats_reconnect_max_wait": 0.2,
        "labels": {"zone": "a"},
    }
    values.update(overrides)
    return AgentSettings(**values)


@asynccontextmanager
async def running(runtime: AgentRuntime) -> AsyncIterator[AgentRuntime]:
    task = asyncio.create_task(runtime.run(install_signal_handlers=False))
    try:
        yield runtime
    finally:
        runtime.stop()
        await asyncio.wait_for(task, 15)


def enrolled(nats: NatsServer, data_dir: Path, **kw: Any) -> AgentState:
    state = make_state(nats_url=nats.url, **kw)
    write_state(data_dir, state)
    return state


async def send_command(client: Any, agent_id: str, kind: str, command_id: str, **args: Any) -> None:
    body = {
        "command_id": command_id,
        "kind": kind,
        "issued_at": datetime.now(UTC).isoformat(),
        "args": args,
    }
    await client.publish(subjects.commands(agent_id), json.dumps(body).encode())
    await client.flush()


def ready(runtime: AgentRuntime) -> bool:
    return runtime.readiness.reason() is None
