"""scripts/tools.py builds the control plane from the Go module proxy and says exactly what is
missing when it cannot (these tests need neither a cluster nor the network)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from testkit.chart import REPO

UPSTREAM_GO_MOD = """module k8s.io/kubernetes

require (
	k8s.io/api v0.0.0
	sigs.k8s.io/yaml v1.6.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/example/fork => github.com/example/fork v1.2.3
)
"""


def test_every_staging_replace_of_the_upstream_go_mod_becomes_a_versioned_replace(
    tools: ModuleType,
) -> None:
    assert tools.staging_replaces(UPSTREAM_GO_MOD, "v1.37.2") == [
        "replace k8s.io/api => k8s.io/api v0.37.2",
        "replace k8s.io/client-go => k8s.io/client-go v0.37.2",
    ]


def test_kubernetes_is_built_at_the_minor_of_the_pinned_python_client(tools: ModuleType) -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    client_major = pyproject.split('"kubernetes==', 1)[1].split(".", 1)[0]
    assert tools.KUBERNETES_VERSION.startswith(f"v1.{client_major}.")


def test_without_go_it_says_go_is_missing(
    tools: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools, "GO_FALLBACKS", (str(tmp_path / "go"),))
    with pytest.raises(tools.ToolError, match=r"Go is not installed \(no `go` on PATH"):
        tools.ensure_go_tool("kwok", tmp_path / "cache")


def test_without_the_module_proxy_it_names_the_proxy_and_the_module(
    tools: ModuleType, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "GOPROXY": "off",
        "GOMODCACHE": str(tmp_path / "modcache"),
        "PATH": f"/usr/local/go/bin:{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tools.py"), "kwok", "--cache-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if "Go is not installed" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 1
    assert "cannot fetch sigs.k8s.io/kwok@v0.8.0 from the Go module proxy (GOPROXY=off)" in (
        done.stderr
    )
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)  # Go's read-only cache


def test_a_cached_control_plane_is_ready_in_seconds(kube_cluster: object) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tools.py"), "control-plane", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 6
    assert elapsed < 5, f"a cached control plane took {elapsed:.1f}s"
