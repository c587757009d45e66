"""``scripts/build_agent.py``: keys, thin builds, signatures, and (opt-in) the shiv build."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agent.selfupdate.signatures import SigningPublicKey
from testkit.builds import Builds, build_agent, build_script, make_signing_key


def test_keygen_writes_a_private_seed_and_a_public_key_and_never_overwrites(
    tmp_path: Path,
) -> None:
    private, public = make_signing_key(tmp_path / "keys")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.with_suffix(".pub").read_text().strip() == public
    assert SigningPublicKey.parse(public).raw  # what agents are configured with
    assert (tmp_path / "keys" / ".gitignore").read_text().splitlines()[-1] == "*"
    again = build_script("keygen", "--out", str(tmp_path / "keys"))
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"build_agent: error: {private} exists: refusing to overwrite a signing key"
    )


def test_a_thin_build_is_stamped_checksummed_signed_and_reproducible(
    tmp_path: Path, builds: Builds
) -> None:
    built = builds.new
    data = built.path.read_bytes()
    assert data.startswith(f"#!{sys.executable}\n".encode())
    assert os.access(built.path, os.X_OK)
    digest = hashlib.sha256(data).hexdigest()
    assert built.sha256 == digest
    sidecar = built.path.with_name(built.path.name + ".sha256").read_text()
    assert sidecar == f"{digest}  {built.path.name}\n"
    signature = built.path.with_name(built.path.name + ".sig").read_text().strip()
    assert signature == built.signature
    assert SigningPublicKey.parse(builds.public_key).verifies(bytes.fromhex(digest), signature)
    with zipfile.ZipFile(built.path) as archive:
        names = set(archive.namelist())
        stamp = json.loads(archive.read("agent/_build.json"))
    assert {"__main__.py", "agent/cli.py", "agent/cli.pyc", "contracts/messages.py"} <= names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert stamp == {"mode": "thin", "python": python, "version": "0.9.0"}
    again = build_agent("0.9.0", tmp_path, key=None)
    assert again.sha256 == built.sha256, "same sources and version, same bytes"
    assert again.signature is None
    assert not again.path.with_name(again.path.name + ".sig").exists()


def test_the_build_runs_from_its_own_packages(builds: Builds) -> None:
    """The working tree says 0.8.0 and has no _build.json: 0.9.0 can only come from inside."""
    plain = subprocess.run(
        [str(builds.new.path), "version"], capture_output=True, text=True, timeout=30
    )
    assert plain.stdout == "proxima-agent 0.9.0\n"


def test_sign_rewrites_the_sidecars_of_an_existing_build(tmp_path: Path, builds: Builds) -> None:
    unsigned = build_agent("1.0.0", tmp_path, key=None)
    result = build_script("sign", "--signing-key", str(builds.key), str(unsigned.path), "--json")
    assert result.returncode == 0, result.stderr
    signature = json.loads(result.stdout)["signature"]
    assert SigningPublicKey.parse(builds.public_key).verifies(
        bytes.fromhex(unsigned.sha256), signature
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--version", "0.9 beta", "--out", "x"], "build_agent: error: version '0.9 beta'"),
        (
            ["--version", "1.0.0", "--out", "{tmp}", "--signing-key", "{tmp}/none.key"],
            "build_agent: error: cannot read signing key",
        ),
    ],
)
def test_failures_are_one_line(tmp_path: Path, args: list[str], error: str) -> None:
    result = build_script(*(a.format(tmp=tmp_path) for a in args))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(error)


@pytest.mark.skipif(
    os.environ.get("PROXIMA_TEST_SELF_CONTAINED") != "1",
    reason="pip resolves the agent extra (~15 s, needs a package index): "
    "set PROXIMA_TEST_SELF_CONTAINED=1",
)
def test_a_self_contained_build_runs_without_the_project_environment(tmp_path: Path) -> None:
    key, public = make_signing_key(tmp_path / "keys")
    result = build_script(
        "--version", "0.9.9", "--out", str(tmp_path), "--self-contained",
        "--signing-key", str(key), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SHIV_ROOT": str(tmp_path / "shiv")}
    # The interpreter the venv was made from: none of the project's packages are installed there.
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    out = subprocess.run(
        [str(base), "-I", info["artifact"], "version", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert json.loads(out.stdout)["build"]["mode"] == "self-contained", out.stderr
    assert SigningPublicKey.parse(public).verifies(bytes.fromhex(info["sha256"]), info["signature"])
