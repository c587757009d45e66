"""Shared fixtures: a real Console (SQLite, and PostgreSQL in the postgres lane)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.console import ConsoleProcess
from tests.support.postgres import PostgresUnavailableError, ThrowawayPostgres

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    """One throwaway cluster per run. Where PROXIMA_REQUIRE_POSTGRES=1 (CI) its absence fails."""
    try:
        pg = ThrowawayPostgres()
        pg.start()
    except (PostgresUnavailableError, OSError) as exc:
        if os.environ.get("PROXIMA_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"the PostgreSQL lane could not start: {exc}")
        pytest.skip(f"PostgreSQL lane unavailable here: {exc}")
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'console.core.db'}"
    pg: ThrowawayPostgres = request.getfixturevalue("postgres")
    return pg.create_database()


@pytest.fixture
def console_factory(tmp_path: Path) -> Iterator[object]:
    started: list[ConsoleProcess] = []

    def make(name: str = "console", **kwargs: object) -> ConsoleProcess:
        proc = ConsoleProcess(tmp_path / name, **kwargs)  # type: ignore[arg-type]
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.stop()


QUIET_SECONDS = 1.5


@pytest.fixture
def console(console_factory, database_url: str) -> ConsoleProcess:  # type: ignore[no-untyped-def]
    """A Console with a short quiet window, on SQLite and (postgres lane) PostgreSQL."""
    return console_factory(
        database_url=database_url,
        env={
            "PROXIMA_IDENTITY_QUIET_SECONDS": str(QUIET_SECONDS),
            "PROXIMA_AGENT_STALE_SECONDS": str(QUIET_SECONDS),
        },
    )


@pytest.fixture(scope="session")
def prefect_api_url() -> Iterator[str]:
    """One Prefect test harness per test run (it takes ~15 s to start here)."""
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        url = PREFECT_API_URL.value()
        assert url, "the harness did not set PREFECT_API_URL"
        yield str(url)
