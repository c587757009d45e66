from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import QUIET_SECONDS
from tests.support.agents import AgentProcess
from tests.support.console import ConsoleProcess


@pytest.fixture
def e2e_console(console_factory) -> ConsoleProcess:  # type: ignore[no-untyped-def]
    return console_factory(
        env={
            "PROXIMA_IDENTITY_QUIET_SECONDS": str(QUIET_SECONDS),
            "PROXIMA_AGENT_STALE_SECONDS": str(QUIET_SECONDS),
        }
    )


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def make(
        console: ConsoleProcess,
        name: str,
        token: str,
        *,
        data: str | None = None,
        start: bool = True,
        **kwargs: object,
    ) -> AgentProcess:
        proc = AgentProcess(
            name=name,
            data_dir=tmp_path / "agents" / (data or name),
            backend_url=console.url,
            install_token=token,
            **kwargs,  # type: ignore[arg-type]
        )
        started.append(proc)
        return proc.start() if start else proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def flow_console(console_factory, prefect_api_url, monkeypatch):  # type: ignore[no-untyped-def]
    """A Console wired to the session's Prefect harness, for end-to-end rollouts."""
    console = console_factory(
        name="flow-console",
        env={"PROXIMA_PREFECT_API_URL": prefect_api_url, "PROXIMA_AGENT_STALE_SECONDS": "30"},
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.token)
    return console
