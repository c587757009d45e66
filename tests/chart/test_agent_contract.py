"""What the chart passes the agent is what the agent reads: env names and values, the image.

The agent's settings ignore unknown PROXIMA_* variables, so a misspelt name in a template would
be silently dropped; these tests hold each name to a field of ``agent.settings.AgentSettings``
and feed the rendered values through it as the kubelet would hand them to the container.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from agent import signals
from agent.settings import ENV_PREFIX, AgentSettings
from testkit.chart import REPO, Helm, container, env, mounts, pod_spec

DOCKERFILE = REPO / "docker" / "agent.Dockerfile"
DOWNWARD_API = {
    "spec.nodeName": "worker-1",
    "status.hostIP": "10.0.0.7",
    "metadata.name": "proxima-agent-cluster-agent-0",
    "metadata.namespace": "proxima-system",
    "metadata.uid": "9b0c3f4e-6a51-4b5e-9a57-2f1f0c1d2e3f",
}


def container_environment(workload: dict[str, Any]) -> dict[str, str]:
    """The environment the container starts with: downward API filled in, $(VAR) expanded."""
    resolved: dict[str, str] = {}
    for name, value in env(workload).items():
        if isinstance(value, dict):
            value = DOWNWARD_API[value["fieldRef"]["fieldPath"]]
        resolved[name] = re.sub(r"\$\((\w+)\)", lambda m: resolved[m.group(1)], value)
    return resolved


def agent_settings(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]):
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return AgentSettings()


@pytest.fixture(scope="module")
def full(helm: Helm, ci_values):
    """Everything switched on: host metrics, host identity, HA, excluded namespaces."""
    return helm.template(
        [ci_values["ha"]],
        {
            "clusterAgent.excludeNamespaces": "{kube-system,kube-public}",
            "nodeAgent.logLevel": "debug",
        },
    )


def test_every_proxima_variable_the_chart_sets_is_a_setting_of_the_agent(full):
    fields = set(AgentSettings.model_fields)
    names = [
        name
        for workload in (full.daemonset, full.statefulset)
        for name in env(workload)
        if name.startswith(ENV_PREFIX)
    ]
    assert names, "the chart sets no PROXIMA_ variable at all"
    for name in names:
        assert name.removeprefix(ENV_PREFIX).lower() in fields, name


def test_the_node_agent_environment_parses_into_the_settings_the_chart_means(
    full, monkeypatch: pytest.MonkeyPatch
):
    settings = agent_settings(monkeypatch, container_environment(full.daemonset))
    assert settings.agent_type == "k8s-node-monitor"
    assert settings.name == "worker-1"
    assert settings.data_dir == Path("/var/lib/proxima-agent")
    assert settings.install_token_file == Path("/etc/proxima/install-token/token")
    assert settings.backend_url == "https://api-console.prxm.uz"
    assert settings.host_root == Path("/host")
    assert settings.host_proc == Path("/host/proc")
    assert settings.host_sys == Path("/host/sys")
    assert settings.host_metrics is True
    assert settings.heartbeat_interval == 30.0
    assert settings.metrics_interval == 60.0
    assert settings.health_host == "0.0.0.0"
    assert settings.health_port == 8181
    assert settings.log_level == "debug"
    assert settings.kubelet_url == "https://10.0.0.7:10250"
    assert settings.cluster_slug == "production-rke2"
    # Its own pod, for the Events it records (a refused enrollment).
    assert settings.pod_name == "proxima-agent-cluster-agent-0"  # the double's one name
    assert settings.pod_namespace == "proxima-system"
    assert settings.pod_uid == DOWNWARD_API["metadata.uid"]


def test_the_cluster_agent_environment_parses_into_the_settings_the_chart_means(
    full, monkeypatch: pytest.MonkeyPatch
):
    settings = agent_settings(monkeypatch, container_environment(full.statefulset))
    assert settings.agent_type == "k8s-cluster-collector"
    assert settings.name == "proxima-agent-cluster-agent-0"
    assert settings.pod_namespace == "proxima-system"
    assert settings.data_dir == Path("/var/lib/proxima-agent")
    assert settings.cluster_name == "production-rke2"
    assert settings.cluster_slug == "production-rke2"
    assert settings.exclude_namespaces == ("kube-system", "kube-public")
    assert settings.lease_name == "proxima-agent-cluster-agent"
    assert settings.replicas == 2
    assert settings.health_port == 8181
    assert settings.pod_name == "proxima-agent-cluster-agent-0"
    assert settings.pod_uid == DOWNWARD_API["metadata.uid"]


def test_the_agent_reads_the_host_identity_where_the_node_agent_mounts_it(full):
    mounted = mounts(full.daemonset)
    root = Path(env(full.daemonset)["PROXIMA_HOST_ROOT"])

    def covered(path: Path) -> bool:
        """A mount is the path or one of its parent directories."""
        return any(str(p) in mounted for p in (path, *path.parents) if p != Path("/"))

    assert covered(signals.machine_id_path(root))
    assert covered(signals.dmi_uuid_paths(root)[0])


def test_the_image_runs_as_the_uid_the_cluster_agent_pod_demands(full):
    text = DOCKERFILE.read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] == "65532"
    security = pod_spec(full.statefulset)["securityContext"]
    assert security["runAsUser"] == 65532 and security["fsGroup"] == 65532
    assert container(full.statefulset)["command"][0] == "proxima-agent"


def test_the_image_is_debian_python_with_the_agent_extra_and_a_writable_data_dir():
    """The Dockerfile builds what ``scripts/release.py`` builds without Docker (Debian's own
    python3, the agent extra in a venv; ``tests/release`` holds the two together)."""
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM debian:bookworm-slim$", text, re.M)
    assert '"proxima-fleet[agent]==${VERSION}"' in text
    assert "/var/lib/proxima-agent" in text
    assert "PYTHONDONTWRITEBYTECODE=1" in text, "a read-only root cannot take __pycache__"
