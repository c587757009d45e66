"""A real Console process (uvicorn + embedded nats-server) for tests and benchmarks."""

from __future__ import annotations

import base64
import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import nkeys

from contracts.enrollment import enrollment_message
from testkit.builds import suite_public_key
from testkit.net import free_port
from testkit.waiting import CannotHappenError, wait_for


def enrollment_body_message(body: dict[str, Any]) -> bytes:
    """The enrollment message for a JSON body as sent (its fields, whatever their values)."""
    signals = {k: v for k, v in (body.get("signals") or {}).items() if v}
    return enrollment_message(
        install_token=str(body["install_token"]),
        agent_type=str(body["agent_type"]),
        name=str(body["name"]),
        public_key=str(body["public_key"]),
        signed_at=datetime.fromisoformat(str(body["signed_at"])),
        version=str(body["version"]),
        instance_id=str(body["instance_id"]),
        signals=signals,
        can_self_update=bool(body.get("can_self_update", True)),
        labels=dict(body.get("labels") or {}),
    )


# The identity quiet window and stale timeout the suite's Consoles run with (seconds).
QUIET_SECONDS = 1.5
QUIET_ENV = {
    "PROXIMA_IDENTITY_QUIET_SECONDS": str(QUIET_SECONDS),
    "PROXIMA_AGENT_STALE_SECONDS": str(QUIET_SECONDS),
}


class ConsoleProcess:
    """``python -m console serve`` on free loopback ports (HTTP and its embedded NATS), its
    database bootstrapped in-process first; output in ``<data_dir>/console.log``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        database_url: str | None = None,
        env: dict[str, str] | None = None,
        nats_port: int | None = None,
        port: int | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        # How the Console is run (``bench.enrollment --profile`` runs it under cProfile).
        self.command = command or [sys.executable, "-m", "console", "serve"]
        self.port = port or free_port()
        self.nats_port = nats_port or free_port()
        self.env = {
            **os.environ,
            "PROXIMA_DATA_DIR": str(data_dir),
            "PROXIMA_PORT": str(self.port),
            "PROXIMA_NATS_PORT": str(self.nats_port),
            "PROXIMA_HEARTBEAT_FLUSH_SECONDS": "0.05",
            # The swarm retries results within 2 s: a target's silence counts after 1 s of
            # listening in tests (the fault tests set a grace above the swarm's backoff).
            "PROXIMA_RESULT_GRACE_SECONDS": "1",
            "PROXIMA_LOG_LEVEL": "info",
            # builds signed with the suite's key are hosted; testkit.rollouts' reference
            # artifact (http://127.0.0.1:1/a.pyz) is an allowed source
            "PROXIMA_SIGNING_PUBLIC_KEYS": suite_public_key(),
            "PROXIMA_ARTIFACT_URL_ALLOW": "http://127.0.0.1:1/",
            **(env or {}),
        }
        if database_url:
            self.env["PROXIMA_DATABASE_URL"] = database_url
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "console.log"
        self.token = ""
        self.bootstrap_info: dict[str, Any] = {}
        self.orphans: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    def bootstrap(self, client: str = "acme", environment: str = "prod") -> dict[str, Any]:
        """In-process, for speed; ``tests/console/test_cli.py`` covers the real command."""
        from sqlmodel import Session

        from console.bootstrap import bootstrap
        from console.core.db import make_engine, migrate

        url = self.database_url()
        migrate(url)
        engine = make_engine(url)
        try:
            with Session(engine) as session:
                result = bootstrap(session, client_name=client, environment_name=environment)
        finally:
            engine.dispose()
        return dataclasses.asdict(result)

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        if self.process is not None and self.process.poll() is None:
            return self  # started already: a second process would be left running untracked
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.token:
            self.bootstrap_info = self.bootstrap()
            self.token = self.bootstrap_info["token"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def up() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise CannotHappenError(f"console exited: {self.log_path.read_text()[-2000:]}")
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200

        try:
            wait_for(up, timeout=timeout, what="console /healthz")
        except BaseException:
            self.stop()  # a Console that never came up is still a process (and a nats-server)
            raise
        return self

    def stop(self) -> None:
        self.end_orphans()
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def database_url(self) -> str:
        from console.core.settings import ConsoleSettings

        return (
            self.env.get("PROXIMA_DATABASE_URL")
            or ConsoleSettings(data_dir=self.data_dir).resolved_database_url()
        )

    def nats_user_jwt(
        self,
        public_key: str,
        *,
        environment_id: str | None = None,
        pub: list[str] | None = None,
        sub: list[str] | None = None,
        name: str = "test-user",
    ) -> str:
        """A user JWT signed by an environment's account (default: the bootstrap one), with the
        keys the Console holds in its database, as a Console replica would sign it."""
        from console.core.db import make_engine
        from console.nats.jwt import user_jwt
        from console.services.nats_keys import environment_key

        env = environment_id or self.bootstrap_info["environment_id"]
        engine = make_engine(self.database_url())
        try:
            account = environment_key(engine, env)
        finally:
            engine.dispose()
        return user_jwt(account, public_key=public_key, name=name, pub=pub or [], sub=sub or [])

    def kill(self) -> list[int]:
        """SIGKILL the Console, as an OOM killer would; returns the pids its children had (its
        embedded nats-server dies with it: ``PR_SET_PDEATHSIG``)."""
        import psutil

        assert self.process is not None
        children = [c.pid for c in psutil.Process(self.process.pid).children(recursive=True)]
        self.process.kill()
        self.process.wait()
        self.process = None
        self.orphans = children
        return children

    def end_orphans(self) -> None:
        """SIGKILL what :meth:`kill` left behind, and wait until it is gone."""
        import psutil

        for pid in self.orphans:
            try:
                proc = psutil.Process(pid)
                proc.kill()
                proc.wait(timeout=10)
            except psutil.NoSuchProcess:
                pass
        self.orphans = []

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=30,
        )

    def install_token(self, *, by: str | None = None, **body: Any) -> str:
        """A new install token, minted with ``by`` (an API token; the bootstrap one if None)."""
        with self.client(by) as c:
            r = c.post("/api/v1/install-tokens", json={"name": "test", **body})
            r.raise_for_status()
            return str(r.json()["token"])

    def worker_token(self) -> str:
        """A token with exactly the scopes docs/flows.md gives the Prefect worker."""
        from flows.settings import WORKER_SCOPES

        return self.api_token(list(WORKER_SCOPES))

    def api_token(self, scopes: list[str], token: str | None = None) -> str:
        with self.client(token) as c:
            r = c.post(
                "/api/v1/api-tokens", json={"name": f"t-{uuid.uuid4().hex[:6]}", "scopes": scopes}
            )
            r.raise_for_status()
            return str(r.json()["token"])

    def agent(self, agent_id: str) -> dict[str, Any]:
        with self.client() as c:
            r = c.get(f"/api/v1/fleet/agents/{agent_id}")
            r.raise_for_status()
            data: dict[str, Any] = r.json()
            return data


# What the ``console_factory`` fixture hands a test: ``make(name="console", **kwargs)``.
ConsoleFactory = Callable[..., ConsoleProcess]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class Identity:
    """A key pair and what an agent would present, for driving the API directly."""

    name: str
    agent_type: str = "host"
    machine_id: str | None = None
    product_uuid: str | None = None
    seed: bytes = field(
        default_factory=lambda: nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    )
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    jwt: str | None = None

    @property
    def keypair(self) -> Any:
        return nkeys.from_seed(bytearray(self.seed))

    @property
    def public_key(self) -> str:
        return str(self.keypair.public_key.decode())

    def sign(self, message: bytes) -> str:
        return b64(self.keypair.sign(message))

    def enroll_body(
        self, install_token: str, version: str = "0.8.0", **over: Any
    ) -> dict[str, Any]:
        """A signed enrollment body; ``over`` replaces fields *before* signing (a ``signature``
        in ``over`` replaces the signature itself)."""
        signed_at = datetime.now(UTC)
        body: dict[str, Any] = {
            "install_token": install_token,
            "agent_type": self.agent_type,
            "name": self.name,
            "public_key": self.public_key,
            "signed_at": signed_at.isoformat(),
            "signals": {"machine_id": self.machine_id, "product_uuid": self.product_uuid},
            "version": version,
            "instance_id": self.instance_id,
        }
        body.update({k: v for k, v in over.items() if k != "signature"})
        body["signature"] = over.get("signature") or self.sign(enrollment_body_message(body))
        return body

    def enroll(self, console: ConsoleProcess, install_token: str, **over: Any) -> httpx.Response:
        r = httpx.post(
            f"{console.url}/api/v1/agents/enroll",
            json=self.enroll_body(install_token, **over),
            timeout=30,
        )
        if r.status_code in (200, 201):
            self.jwt = r.json()["nats_jwt"]
        return r

    def nats_options(self) -> dict[str, Any]:
        """Keyword arguments for nats.connect: the seed signs the nonce, the JWT says who."""
        jwt = (self.jwt or "").encode()
        return {"nkeys_seed_str": self.seed.decode(), "user_jwt_cb": lambda: jwt}
