"""Settings: durations, labels, env vs flags, the chart's reserved variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.settings import build_settings
from contracts.bounds import parse_labels
from contracts.vocabulary import AgentType


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("PROXIMA_"):
            monkeypatch.delenv(key)


def test_defaults_match_the_documented_contract() -> None:
    s = build_settings()
    assert s.agent_type is AgentType.HOST
    assert s.data_dir == Path("/var/lib/proxima-agent")
    assert s.host_root == Path("/")
    assert s.heartbeat_interval == 30.0
    assert s.metrics_interval == 60.0
    assert s.host_metrics is True
    assert (s.health_host, s.health_port) == ("127.0.0.1", 8181)
    assert s.enroll_backoff_max == 60.0
    assert s.labels == {}
    assert s.name  # the hostname


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("45", 45), ("0.5s", 0.5)],
)
def test_durations_are_read_like_the_chart_writes_them(
    monkeypatch: pytest.MonkeyPatch, text: str, seconds: float
) -> None:
    monkeypatch.setenv("PROXIMA_HEARTBEAT_INTERVAL", text)
    assert build_settings().heartbeat_interval == seconds


@pytest.mark.parametrize("text", ["5x", "", "m5", "-3s", "0s"])
def test_bad_durations_name_the_flag_and_the_variable(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_settings(metrics_interval=text)
    assert "--metrics-interval / PROXIMA_METRICS_INTERVAL" in str(info.value)


def test_labels_parse_from_key_value_pairs() -> None:
    assert parse_labels("zone=a, tier = web ,") == {"zone": "a", "tier": "web"}
    assert parse_labels("") == {}
    assert parse_labels("empty=") == {"empty": ""}


@pytest.mark.parametrize("text", ["novalue", "=v", "a=1,a=2", "k=" + "x" * 64])
def test_bad_labels_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_labels(text)


def test_labels_come_from_the_environment_without_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXIMA_LABELS", "zone=eu-1,role=db")
    assert build_settings().labels == {"zone": "eu-1", "role": "db"}


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXIMA_AGENT_TYPE", "k8s-node-monitor")
    monkeypatch.setenv("PROXIMA_AGENT_NAME", "from-env")
    s = build_settings(agent_name="from-flag")
    assert s.agent_type is AgentType.K8S_NODE_MONITOR
    assert s.name == "from-flag"


def test_the_charts_reserved_variables_do_not_break_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in {
        "PROXIMA_CLUSTER_NAME": "prod",
        "PROXIMA_CLUSTER_SLUG": "prod",
        "PROXIMA_SYNC_INTERVAL": "5m",
        "PROXIMA_POD_LIMIT": "5000",
        "PROXIMA_EXCLUDE_NAMESPACES": "kube-system,kube-public",
        "PROXIMA_LEASE_NAME": "proxima-agent",
        "PROXIMA_POD_NAMESPACE": "proxima-system",
        "PROXIMA_REPLICAS": "2",
        "PROXIMA_KUBELET_URL": "https://10.0.0.1:10250",
        "PROXIMA_KUBELET_INSECURE_SKIP_VERIFY": "true",
        "PROXIMA_HOST_PROC": "/host/proc",
        "PROXIMA_HOST_SYS": "/host/sys",
        "PROXIMA_SOMETHING_NEW": "ignored",
    }.items():
        monkeypatch.setenv(key, value)
    s = build_settings()
    assert s.host_proc == Path("/host/proc")
    assert s.cluster_name == "prod"


def test_backend_url_is_checked_and_normalised() -> None:
    assert build_settings(backend_url="https://console.example/").backend_url == (
        "https://console.example"
    )
    with pytest.raises(ConfigError, match="--backend-url / PROXIMA_BACKEND_URL"):
        build_settings(backend_url="console.example")


def test_unknown_agent_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--agent-type / PROXIMA_AGENT_TYPE"):
        build_settings(agent_type="toaster")


def test_install_token_never_shows_in_repr() -> None:
    s = build_settings(install_token="tok-very-secret-123")
    assert "tok-very-secret-123" not in repr(s)
