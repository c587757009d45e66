"""Fixtures for the chart tests: the real helm and kubectl, extracted by scripts/tools.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.chart.chart_rendering import CI_VALUES, REPO, Helm

_TOOLS_PATH = REPO / "scripts" / "tools.py"


def _load_tools():
    spec = importlib.util.spec_from_file_location("proxima_scripts_tools", _TOOLS_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tools():
    """scripts/tools.py as a module."""
    return _load_tools()


@pytest.fixture(scope="session")
def helm_binary(tools) -> Path:
    return tools.ensure_tool("helm").path


@pytest.fixture(scope="session")
def kubectl_binary(tools) -> Path:
    return tools.ensure_tool("kubectl").path


@pytest.fixture(scope="session")
def helm(helm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """Helm v4 with an empty home: no repositories, no kubeconfig, no cluster."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def ci_values() -> dict[str, Path]:
    """The scenario values files in chart/ci/, by scenario name."""
    return {path.stem: path for path in sorted(CI_VALUES.glob("*.yaml"))}
