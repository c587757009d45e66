"""Where ``release.py publish`` puts a release, with credentials, as the chart's page publishes
to an authenticated Helm repository:

- the OCI registry: ``helm registry login --password-stdin`` into a registry config of this run
  only (a Docker ``config.json``, mode 0600), which ``helm push`` and skopeo (``--authfile``)
  then read;
- the classic Helm repository: its ``index.yaml`` is fetched, merged with the new chart
  (``helm repo index --merge``) and uploaded last, after the archive and everything served
  beside it, each by HTTP ``PUT`` with basic auth (nginx's WebDAV ``PUT``, as ChartMuseum's and
  GitLab's package registries take an upload).

Credentials come from the environment, never from argv (where ``ps`` and shell history see
them): ``PROXIMA_RELEASE_REGISTRY_USERNAME`` / ``…_PASSWORD`` and
``PROXIMA_RELEASE_REPO_USERNAME`` / ``…_PASSWORD``; ``…_PASSWORD_FILE`` names a file holding
the password instead. Stdlib only.
"""

from __future__ import annotations

import base64
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REGISTRY_ENV = "PROXIMA_RELEASE_REGISTRY"
REPO_ENV = "PROXIMA_RELEASE_REPO"
TIMEOUT = 120


class RepoError(Exception):
    """One line saying which repository refused what."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"Credentials({self.username!r}, <hidden>)"

    @property
    def basic(self) -> str:
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()


def credentials(prefix: str, what: str) -> Credentials:
    """``<prefix>_USERNAME`` and ``<prefix>_PASSWORD`` (or ``<prefix>_PASSWORD_FILE``)."""
    username = os.environ.get(f"{prefix}_USERNAME", "")
    password = os.environ.get(f"{prefix}_PASSWORD", "")
    password_file = os.environ.get(f"{prefix}_PASSWORD_FILE", "")
    if not password and password_file:
        try:
            password = Path(password_file).read_text().strip()
        except OSError as exc:
            raise RepoError(f"{prefix}_PASSWORD_FILE: {exc}") from exc
    if not username or not password:
        raise RepoError(
            f"{what} wants credentials: set {prefix}_USERNAME and {prefix}_PASSWORD "
            f"(or {prefix}_PASSWORD_FILE) in the environment"
        )
    return Credentials(username, password)


# -- the OCI registry ------------------------------------------------------------------------------


def registry_login(
    helm: Path, registry: str, creds: Credentials, config: Path, *, plain_http: bool
) -> Path:
    """``helm registry login`` with the password on stdin, into ``config`` (created 0600):
    the auth file ``helm push`` (``--registry-config``) and skopeo (``--authfile``) read."""
    config.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    config.unlink(missing_ok=True)
    with os.fdopen(os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write('{"auths": {}}\n')
    cmd = [str(helm), "registry", "login", registry, "--username", creds.username]
    cmd += ["--password-stdin", "--registry-config", str(config)]
    done = subprocess.run(
        cmd + (["--plain-http"] if plain_http else []),
        input=creds.password,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise RepoError(f"helm registry login {registry} failed: {reason}")
    return config


# -- the classic Helm repository -------------------------------------------------------------------


def _request(method: str, url: str, creds: Credentials, body: bytes | None = None) -> bytes:
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Authorization", creds.basic)
    if body is not None:
        request.add_header("Content-Type", "application/octet-stream")
    with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
        return bytes(answer.read())


def fetch_index(repo_url: str, creds: Credentials) -> bytes | None:
    """The repository's index.yaml, or None where it has none yet (a first release)."""
    url = f"{repo_url.rstrip('/')}/index.yaml"
    try:
        return _request("GET", url, creds)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise RepoError(f"GET {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise RepoError(f"GET {url}: {exc}") from exc


def upload(repo_url: str, creds: Credentials, path: Path, name: str) -> None:
    url = f"{repo_url.rstrip('/')}/{name}"
    try:
        _request("PUT", url, creds, path.read_bytes())
    except urllib.error.HTTPError as exc:
        raise RepoError(f"PUT {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise RepoError(f"PUT {url}: {exc}") from exc


def served_files(repo_dir: Path, version: str) -> Iterator[tuple[Path, str]]:
    """What this release adds beside index.yaml: the archive, its provenance, the contents
    list, the public key and the image signatures, as (file, path in the repository)."""
    for name in (
        f"proxima-agent-{version}.tgz",
        f"proxima-agent-{version}.tgz.prov",
        f"proxima-agent-{version}.contents.txt",
        "proxima-release.gpg",
    ):
        if (repo_dir / name).is_file():
            yield repo_dir / name, name
    signatures = repo_dir / "signatures"
    for path in sorted(signatures.rglob("*")) if signatures.is_dir() else []:
        if path.is_file():
            yield path, path.relative_to(repo_dir).as_posix()


def publish_repo(
    helm: Path, repo_dir: Path, repo_url: str, version: str, creds: Credentials
) -> list[str]:
    """Merge the repository's index with this release's chart, upload the files, then the
    index (so a reader never sees an entry whose archive is not there yet). Returns the paths
    uploaded."""
    remote = fetch_index(repo_url, creds)
    cmd = [str(helm), "repo", "index", str(repo_dir), "--url", repo_url]
    if remote is not None:
        merge = repo_dir.parent / f".{repo_dir.name}-remote-index.yaml"
        merge.write_bytes(remote)
        cmd += ["--merge", str(merge)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RepoError(f"helm repo index failed: {done.stderr.strip()[-300:]}")
    uploaded = []
    for path, name in served_files(repo_dir, version):
        upload(repo_url, creds, path, name)
        uploaded.append(name)
    upload(repo_url, creds, repo_dir / "index.yaml", "index.yaml")
    return [*uploaded, "index.yaml"]
