"""The Kubernetes agents' settings: what the chart renders, typed; the slug derived like the
chart derives it; bad values stop the agent naming the variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.settings import build_settings
from contracts.slugs import slugify


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("PROXIMA_"):
            monkeypatch.delenv(key)


def test_the_collector_settings_and_their_documented_defaults() -> None:
    s = build_settings(agent_type="k8s-cluster-collector", cluster_name="prod")
    assert s.sync_interval == 300.0
    assert s.pod_limit == 5000
    assert s.exclude_namespaces == ()
    assert s.lease_name == "proxima-agent-cluster-agent"
    assert s.replicas == 1
    assert (s.lease_duration, s.lease_renew_deadline, s.lease_retry_period) == (15, 10, 2)
    assert s.service_account_dir == Path("/var/run/secrets/kubernetes.io/serviceaccount")


def test_the_chart_environment_parses_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "PROXIMA_AGENT_TYPE": "k8s-cluster-collector",
        "PROXIMA_CLUSTER_NAME": "Production RKE2",
        "PROXIMA_CLUSTER_SLUG": "production-rke2",
        "PROXIMA_SYNC_INTERVAL": "5m",
        "PROXIMA_POD_LIMIT": "2500",
        "PROXIMA_EXCLUDE_NAMESPACES": "kube-system, kube-public,kube-system",
        "PROXIMA_LEASE_NAME": "",
        "PROXIMA_REPLICAS": "3",
        "PROXIMA_KUBELET_INSECURE_SKIP_VERIFY": "false",
    }.items():
        monkeypatch.setenv(key, value)
    s = build_settings()
    assert s.cluster_slug == "production-rke2"
    assert (s.sync_interval, s.pod_limit, s.replicas) == (300.0, 2500, 3)
    assert s.exclude_namespaces == ("kube-system", "kube-public")
    assert s.lease_name == "proxima-agent-cluster-agent"
    assert s.kubelet_insecure_skip_verify is False


def test_an_empty_exclude_list_as_the_chart_renders_it_is_none() -> None:
    assert build_settings(exclude_namespaces="").exclude_namespaces == ()


def test_without_a_slug_it_is_derived_from_the_name_and_bounded_to_63() -> None:
    name = "Europe West 1 — Production Cluster with a very long name that overflows sixty-three"
    s = build_settings(agent_type="k8s-cluster-collector", cluster_name=name)
    assert s.cluster_slug == slugify(name)
    assert len(s.cluster_slug) <= 63 and not s.cluster_slug.endswith("-")
    node = build_settings(agent_type="k8s-node-monitor", cluster_name="My Cluster (prod)")
    assert node.cluster_slug == "my-cluster-prod"
    assert build_settings(agent_type="k8s-node-monitor").cluster_slug is None


@pytest.mark.parametrize(
    ("values", "label", "message"),
    [
        ({"agent_type": "k8s-cluster-collector"}, "PROXIMA_CLUSTER_SLUG", "CLUSTER_NAME"),
        (
            {"agent_type": "k8s-cluster-collector", "cluster_name": "---"},
            "PROXIMA_CLUSTER_SLUG",
            "no letter or digit",
        ),
        ({"cluster_slug": "Bad_Slug"}, "PROXIMA_CLUSTER_SLUG", "not a DNS label"),
        ({"pod_limit": "0"}, "PROXIMA_POD_LIMIT", "greater than or equal to 1"),
        ({"replicas": "two"}, "PROXIMA_REPLICAS", "integer"),
        ({"sync_interval": "0s"}, "PROXIMA_SYNC_INTERVAL", "greater than zero"),
        ({"exclude_namespaces": "kube_system"}, "PROXIMA_EXCLUDE_NAMESPACES", "namespace"),
        ({"kubelet_url": "10.0.0.1:10250"}, "PROXIMA_KUBELET_URL", "https://"),
        (
            {"lease_duration": "10s", "lease_renew_deadline": "10s"},
            "PROXIMA_LEASE_RETRY_PERIOD",
            "PROXIMA_LEASE_DURATION > PROXIMA_LEASE_RENEW_DEADLINE",
        ),
    ],
)
def test_bad_values_stop_the_agent_naming_the_variable(
    values: dict[str, str], label: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        build_settings(**values)
    assert label in str(caught.value)
    assert message in str(caught.value)
