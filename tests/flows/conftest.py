"""Fixtures of the flow tests (the Prefect harness is session-wide, in tests/conftest.py)."""

import pytest


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
