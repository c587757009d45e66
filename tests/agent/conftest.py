"""Fixtures for the agent tests; the machinery lives in ``agent_testkit``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.agent_testkit import AgentProcess, FakeConsole, NatsServer


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
