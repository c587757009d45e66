"""One version, in contracts.VERSION: pyproject reads it, release.py packages the chart and tags
the image with it, `set-version` rewrites it and Chart.yaml's copy together."""

from __future__ import annotations

import importlib.util
import shutil
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
