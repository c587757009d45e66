"""Zipapp builds of the agent by the real build script (good and deliberately broken ones),
and an HTTP server agents download them from."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from testkit import REPO
from testkit.net import LoopbackHTTPServer

BUILD_SCRIPT = REPO / "scripts" / "build_agent.py"


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


# The suite's build-signing key: every test Console trusts it (testkit.console sets
# PROXIMA_SIGNING_PUBLIC_KEYS), so a build signed with it can be uploaded. Test only.
SUITE_SIGNING_SEED = bytes(range(1, 33))


def suite_public_key() -> str:
    import base64

    import nacl.signing

    raw = bytes(nacl.signing.SigningKey(SUITE_SIGNING_SEED).verify_key)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def suite_signing_key(directory: Path) -> tuple[Path, str]:
    """(private key file, public key text) of the suite's key, in keygen's format."""
    import base64

    directory.mkdir(parents=True, exist_ok=True)
    key = directory / "proxima-signing.key"
    key.write_text(base64.urlsafe_b64encode(SUITE_SIGNING_SEED).decode().rstrip("=") + "\n")
    key.chmod(0o600)
    public = suite_public_key()
    (directory / "proxima-signing.pub").write_text(public + "\n")
    return key, public


def build_agent(
    version: str, out: Path, *, key: Path | None, source_root: Path = REPO, name: str | None = None
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
            REPO / package, target / package, ignore=shutil.ignore_patterns("__pycache__")
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
    key, public = suite_signing_key(root / "keys")
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


class ArtifactServer(LoopbackHTTPServer):
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

        super().__init__(Handler)
