"""One Prefect test harness per test run (it takes ~15 s to start here)."""

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def prefect_api_url() -> Iterator[str]:
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        url = PREFECT_API_URL.value()
        assert url, "the harness did not set PREFECT_API_URL"
        yield str(url)


@pytest.fixture
def flow_console(console_factory, prefect_api_url, monkeypatch):  # type: ignore[no-untyped-def]
    """A Console that starts and resumes flow runs through the harness's Prefect API."""
    console = console_factory(
        env={
            "PROXIMA_PREFECT_API_URL": prefect_api_url,
            "PROXIMA_AGENT_STALE_SECONDS": "30",
        }
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.token)
    return console
