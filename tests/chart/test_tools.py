"""scripts/tools.py: the helm and kubectl the tests use come from the repo's own script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.chart import REPO

SCRIPT = REPO / "scripts" / "tools.py"


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tools-cache")


def test_tools_prints_the_path_of_an_executable_helm_4(private_cache: Path) -> None:
    done = run_script("helm", "--cache-dir", str(private_cache))
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.is_relative_to(private_cache)
    assert os.access(path, os.X_OK)
    version = subprocess.run(
        [str(path), "version", "--short"], capture_output=True, text=True, check=True
    )
    assert version.stdout.startswith("v4."), version.stdout


def test_tools_extracts_into_the_repos_gitignored_cache_by_default(
    tools, helm_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert helm_binary.is_relative_to(tools.default_cache_dir())
    monkeypatch.delenv("PROXIMA_TOOLS_CACHE", raising=False)
    assert tools.default_cache_dir() == REPO / ".cache" / "tools"
    # ".cache", not ".cache/": a pattern with a slash matches only directories, and a symlink
    # named .cache (a worktree's) was once committed past it.
    assert ".cache" in (REPO / ".gitignore").read_text().split()


def test_tools_reuses_an_extracted_binary_instead_of_writing_it_again(private_cache: Path) -> None:
    first = Path(run_script("helm", "--cache-dir", str(private_cache)).stdout.strip())
    inode = first.stat().st_ino
    again = run_script("helm", "--cache-dir", str(private_cache))
    assert again.returncode == 0, again.stderr
    assert Path(again.stdout.strip()) == first
    assert first.stat().st_ino == inode, "an up-to-date binary was rewritten"


def test_tools_replaces_a_truncated_binary(private_cache: Path) -> None:
    path = Path(run_script("helm", "--cache-dir", str(private_cache)).stdout.strip())
    size = path.stat().st_size
    path.write_bytes(b"#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    again = run_script("helm", "--cache-dir", str(private_cache))
    assert again.returncode == 0, again.stderr
    assert path.stat().st_size == size


def test_tools_json_names_the_tool_its_path_and_the_tarball_it_came_from(
    private_cache: Path,
) -> None:
    done = run_script("kubectl", "--json", "--cache-dir", str(private_cache))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["tool"] == "kubectl"
    assert Path(answer["path"]).name == "kubectl"
    assert answer["source"].endswith(".jsii.tgz")


def test_tools_fails_with_a_one_line_reason_when_the_layer_tarball_is_missing(
    tmp_path: Path,
) -> None:
    done = run_script(
        "helm",
        "--cache-dir",
        str(tmp_path),
        env={"PROXIMA_KUBECTL_LAYER_TGZ": str(tmp_path / "missing.tgz")},
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "missing.tgz is not a file" in done.stderr
