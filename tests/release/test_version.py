"""One version, in contracts.VERSION: pyproject reads it, release.py packages the chart and tags
the image with it, `set-version` rewrites it and Chart.yaml's copy together."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import contracts
from testkit.release import REPO, run_release


def _release() -> ModuleType:
    name = "proxima_scripts_release"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "release.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_pyproject_takes_its_version_from_contracts():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "contracts.VERSION"}


def test_release_version_prints_contracts_version():
    done = run_release("version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == contracts.VERSION


def test_set_version_rewrites_the_version_and_the_charts_copy(tmp_path: Path, monkeypatch):
    release = _release()
    init = tmp_path / "contracts" / "__init__.py"
    init.parent.mkdir()
    shutil.copy(REPO / "contracts" / "__init__.py", init)
    chart = tmp_path / "chart"
    shutil.copytree(REPO / "chart" / "proxima-agent", chart)
    monkeypatch.setattr(release, "VERSION_FILE", init)
    monkeypatch.setattr(release, "CHART", chart)
    release.set_version("1.2.3")
    assert 'VERSION = "1.2.3"' in init.read_text()
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert (meta["version"], meta["appVersion"]) == ("1.2.3", "1.2.3")
    with pytest.raises(release.ReleaseError, match="not semver"):
        release.set_version("1.2")


def test_pinning_sets_both_agents_image_to_the_digest():
    release = _release()
    values = (REPO / "chart" / "proxima-agent" / "values.yaml").read_text()
    digest = "sha256:" + "ab" * 32
    pinned = yaml.safe_load(release.pin_values(values, "reg.example/proxima/proxima-agent", digest))
    for agent in ("nodeAgent", "clusterAgent"):
        assert pinned[agent]["image"]["repository"] == "reg.example/proxima/proxima-agent"
        assert pinned[agent]["image"]["digest"] == digest
    unpinned = yaml.safe_load(values)
    assert {k: v for k, v in pinned.items() if k not in ("nodeAgent", "clusterAgent")} == {
        k: v for k, v in unpinned.items() if k not in ("nodeAgent", "clusterAgent")
    }


def test_usage_errors_are_one_line():
    done = run_release(
        "publish",
        "--registry",
        "127.0.0.1:1",
        "--repo-dir",
        "/nonexistent",
        "--repo-url",
        "http://x",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "release: error: pass --gpg-home DIR (a release key) or --no-sign"


def _checkout(tmp_path: Path, tag: str | None) -> Path:
    """A git repository holding what release.py reads (scripts/, contracts.VERSION, the
    chart), committed, HEAD tagged ``tag``."""
    root = tmp_path / "checkout"
    shutil.copytree(
        REPO / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__")
    )
    (root / "contracts").mkdir()
    shutil.copy(REPO / "contracts" / "__init__.py", root / "contracts" / "__init__.py")
    shutil.copytree(REPO / "chart" / "proxima-agent", root / "chart" / "proxima-agent")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "release"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    if tag:
        subprocess.run([*git, "tag", tag], check=True, capture_output=True)
    return root


def _release_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "release.py"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_tag_naming_the_version_is_accepted(tmp_path: Path):
    root = _checkout(tmp_path, f"v{contracts.VERSION}")
    done = _release_in(root, "version")
    assert (done.returncode, done.stdout.strip()) == (0, contracts.VERSION), done.stderr


def test_publish_refuses_when_the_tag_and_the_version_disagree(tmp_path: Path):
    """Published chart versions track the release tag (the chart's page): a checkout tagged
    with another version publishes nothing (refused before any credential, build or push)."""
    root = _checkout(tmp_path, "v99.0.0")
    expected = f"release: error: HEAD is tagged v99.0.0 but VERSION is {contracts.VERSION}"
    assert _release_in(root, "version").stderr.strip() == expected
    done = _release_in(
        root, "publish", "--registry", "127.0.0.1:1", "--repo-url", "http://127.0.0.1:1/x",
        "--out", str(tmp_path / "out"), "--no-sign",
    )  # fmt: skip
    assert (done.returncode, done.stderr.strip()) == (1, expected)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key", ["version", "appVersion"])
def test_publish_refuses_when_chart_yaml_disagrees_with_the_version(tmp_path: Path, key: str):
    root = _checkout(tmp_path, f"v{contracts.VERSION}")
    chart = root / "chart" / "proxima-agent" / "Chart.yaml"
    text = chart.read_text()
    chart.write_text(re.sub(rf"^{key}: .*$", f'{key}: "99.0.0"', text, flags=re.M))
    done = _release_in(
        root, "publish", "--registry", "127.0.0.1:1", "--repo-url", "http://127.0.0.1:1/x",
        "--out", str(tmp_path / "out"), "--no-sign",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"release: error: Chart.yaml's {key} is 99.0.0 but VERSION is {contracts.VERSION} "
        f"(`release.py set-version {contracts.VERSION}` writes both)"
    )
