"""The URL the Console hands to agents (backendUrl in the wizard, hosted build URLs): a warning
when PROXIMA_PUBLIC_URL is unset or loopback."""

import pytest

from console.core.settings import public_url_warning


@pytest.mark.parametrize(
    ("public_url", "url", "says"),
    [
        (None, "http://127.0.0.1:8700", "cannot reach a loopback address"),
        (None, "http://localhost:8700", "cannot reach a loopback address"),
        (None, "http://10.0.0.5:8700", "is not set"),
        ("http://127.0.0.1:8700", "http://127.0.0.1:8700", "set to a loopback address"),
        (None, "http://[::1]:8700", "cannot reach a loopback address"),
    ],
)
def test_an_unset_or_loopback_public_url_is_warned_about(public_url, url, says):
    warning = public_url_warning(public_url, url)
    assert warning is not None and says in warning and "PROXIMA_PUBLIC_URL" in warning


def test_a_configured_public_url_is_not_warned_about():
    url = "https://console.example.com"
    assert public_url_warning(url, url) is None


def test_a_flow_run_links_to_prefects_ui():
    from console.core.settings import ConsoleSettings, flow_run_link

    api = ConsoleSettings(prefect_api_url="http://127.0.0.1:4200/api")
    assert flow_run_link(api, "abc") == "http://127.0.0.1:4200/runs/flow-run/abc"
    ui = ConsoleSettings(prefect_api_url="http://p/api", prefect_ui_url="https://prefect.example/")
    assert flow_run_link(ui, "abc") == "https://prefect.example/runs/flow-run/abc"
    assert flow_run_link(ConsoleSettings(), "abc") is None
    assert flow_run_link(api, None) is None
