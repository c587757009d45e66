"""Fixtures for the agent tests; the machinery lives in ``agent_testkit``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.agent_testkit import (
    AgentProcess,
    ArtifactServer,
    Builds,
    FakeConsole,
    NatsServer,
    make_builds,
)


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(workdir=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_console() -> Iterator[FakeConsole]:
    console = FakeConsole()
    console.start()
    try:
        yield console
    finally:
        console.stop()


@pytest.fixture
def agent_processes() -> Iterator[list[AgentProcess]]:
    """Collects agent subprocesses a test starts and stops them all at the end."""
    started: list[AgentProcess] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.stop()


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    """0.8.0 and 0.9.0, and three broken 0.9.x builds, made once by the real build script."""
    return make_builds(tmp_path_factory.mktemp("builds"))


@pytest.fixture
def artifacts(builds: Builds) -> Iterator[ArtifactServer]:
    server = ArtifactServer(builds.dist)
    try:
        yield server
    finally:
        server.stop()
