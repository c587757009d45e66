"""Fixtures for the Kubernetes agents' tests: one real Console for the module run (its NATS
``max_payload`` lowered so a 5,000-pod inventory must be chunked), a NATS observer with the
Console's trust, the Kubernetes API double, and the real helm for the RBAC test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_k8s.k8s_testkit import NatsObserver
from tests.chart.conftest import helm, helm_binary, tools
from tests.support.console import ConsoleProcess
from tests.support.kube import KubeApiDouble
from tests.support.kube.fixtures import kube_api, kube_client, kube_kubeconfig

__all__ = [
    "helm",
    "helm_binary",
    "kube_api",
    "kube_client",
    "kube_kubeconfig",
    "tools",
]

MAX_PAYLOAD = 32 * 1024


@pytest.fixture(scope="session")
def k8s_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(
        tmp_path_factory.mktemp("k8s-console"),
        env={
            "PROXIMA_NATS_MAX_PAYLOAD": str(MAX_PAYLOAD),
            # The collectors under test sync every 0.5 s: so does "the backend's copy".
            "PROXIMA_K8S_SYNC_INTERVAL": "0.5s",
        },
    )
    console.start()
    try:
        yield console
    finally:
        console.stop()


@pytest.fixture(scope="session")
def observer(k8s_console: ConsoleProcess) -> Iterator[NatsObserver]:
    nats_observer = NatsObserver(k8s_console).start()
    try:
        yield nats_observer
    finally:
        nats_observer.stop()


@pytest.fixture
def kube_env(kube_api: KubeApiDouble, tmp_path: Path) -> dict[str, str]:
    """What a collector process needs to reach the double (``KUBECONFIG`` …)."""
    path = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    return kube_api.subprocess_env(path)
