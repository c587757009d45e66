"""pytest fixtures for the double. In a conftest.py: `from tests.support.kube.fixtures import *`
(or list `tests.support.kube.fixtures` in `pytest_plugins`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from tests.support.kube.server import KubeApiDouble

__all__ = ["kube_api", "kube_client", "kube_kubeconfig"]


@pytest.fixture
def kube_api() -> Iterator[KubeApiDouble]:
    """A running double on a free 127.0.0.1 port, stopped after the test."""
    with KubeApiDouble() as double:
        yield double


@pytest.fixture
def kube_client(kube_api: KubeApiDouble) -> Iterator[kubernetes.client.ApiClient]:
    """An official-client ApiClient pointed at `kube_api` (its own Configuration, no globals)."""
    client = kube_api.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def kube_kubeconfig(kube_api: KubeApiDouble, tmp_path: Path) -> Path:
    """A kubeconfig file for subprocesses: pass `kube_api.subprocess_env(path)` in their env."""
    return kube_api.write_kubeconfig(tmp_path / "kubeconfig")
