"""Chart repositories that want credentials, as the chart's page publishes to: a classic Helm
repository served by Debian's nginx behind basic auth (it also takes the upload: WebDAV ``PUT``,
for the publisher only), and credentials made at test time with an htpasswd file (bcrypt,
``htpasswd -B`` from apache2-utils) that nginx and Debian's ``docker-registry`` both read."""

from __future__ import annotations

import secrets
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

from testkit.net import free_port
from testkit.waiting import wait_for

__all__ = ["ChartRepository", "Credentials", "RepoUsers", "write_htpasswd"]


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    @classmethod
    def generate(cls, username: str) -> Credentials:
        """A user with a password made now (none is ever committed)."""
        return cls(username, secrets.token_urlsafe(24))

    def wrong(self) -> Credentials:
        return Credentials(self.username, self.password + "-wrong")

    @property
    def auth(self) -> tuple[str, str]:
        return (self.username, self.password)


def write_htpasswd(path: Path, *users: Credentials) -> Path:
    """An htpasswd file with a bcrypt hash per user; the password goes to ``htpasswd -i`` on
    its stdin, never in its argv."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    for user in users:
        create = [] if path.exists() else ["-c"]
        subprocess.run(
            ["htpasswd", "-B", "-i", *create, str(path), user.username],
            input=user.password,
            text=True,
            capture_output=True,
            check=True,
        )
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class RepoUsers:
    """The publisher (``release.py publish``'s credentials) and a deploy token that may only
    read (what a cluster's ``helm repo add`` or Argo CD holds), with their htpasswd files."""

    publisher: Credentials
    deploy: Credentials
    readers: Path  # both users: GET on the Helm repository, every request to the registry
    publishers: Path  # the publisher only: PUT on the Helm repository

    @classmethod
    def make(cls, directory: Path) -> RepoUsers:
        publisher = Credentials.generate("publisher")
        deploy = Credentials.generate("deploy-token")
        return cls(
            publisher,
            deploy,
            write_htpasswd(directory / "readers.htpasswd", publisher, deploy),
            write_htpasswd(directory / "publishers.htpasswd", publisher),
        )

    def release_env(self) -> dict[str, str]:
        """``release.py publish``'s credentials, in its environment (never in its argv)."""
        return {
            f"PROXIMA_RELEASE_{what}_{key}": value
            for what in ("REGISTRY", "REPO")
            for key, value in (
                ("USERNAME", self.publisher.username),
                ("PASSWORD", self.publisher.password),
            )
        }


NGINX_CONF = """\
daemon off;
master_process off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log {work}/access.log;
  client_body_temp_path {work}/tmp/body;
  proxy_temp_path {work}/tmp/proxy;
  fastcgi_temp_path {work}/tmp/fastcgi;
  uwsgi_temp_path {work}/tmp/uwsgi;
  scgi_temp_path {work}/tmp/scgi;
  default_type application/octet-stream;
  types {{ text/yaml yaml; application/gzip tgz; text/plain txt; }}
  client_max_body_size 64m;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    location / {{
      auth_basic "Proxima charts";
      auth_basic_user_file {readers};
      limit_except GET HEAD {{
        auth_basic_user_file {publishers};
      }}
      dav_methods PUT;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
  }}
}}
"""


class ChartRepository:
    """nginx on a free loopback port serving ``root`` behind basic auth: the readers' file
    (deploy tokens and the publisher) for GET, the publishers' file for PUT."""

    def __init__(self, workdir: Path, readers: Path, publishers: Path) -> None:
        self.workdir = workdir
        self.root = workdir / "www"
        self.readers = readers
        self.publishers = publishers
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/charts"

    @property
    def directory(self) -> Path:
        return self.root / "charts"

    def config(self) -> str:
        return NGINX_CONF.format(
            work=self.workdir,
            port=self.port,
            root=self.root,
            readers=self.readers,
            publishers=self.publishers,
        )

    def start(self) -> ChartRepository:
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "nginx.conf"
        conf.write_text(self.config())
        with open(self.workdir / "nginx.out", "ab") as out:
            self.process = subprocess.Popen(
                ["nginx", "-p", str(self.workdir), "-e", str(self.workdir / "error.log"),
                 "-c", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

        def up() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.log()[-500:]}")
            try:
                return httpx.get(f"{self.url}/", timeout=2).status_code == 401
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=30, what="nginx answers (401 without credentials)")
        return self

    def log(self) -> str:
        parts = [self.workdir / "error.log", self.workdir / "nginx.out"]
        return "".join(p.read_text(errors="replace") for p in parts if p.exists())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
