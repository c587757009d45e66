"""What the onboarding wizard tells the operator to run: the ``helm upgrade --install`` command,
the values-file variant and the Argo CD Application (docs/chart.md; the chart page's Quick Start,
"Using an Existing Secret" and "GitOps (Argo CD)").

Values are escaped for Helm's ``--set`` parser (``\\``, ``,`` and a leading ``{`` are special)
and then for the shell; a value Helm would type as a number, a boolean or null (a cluster named
``2026``) goes through ``--set-string`` so the chart's schema sees a string. YAML strings are
written as JSON strings, which YAML reads back unchanged.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

__all__ = [
    "CHART",
    "CHART_REPO_URL",
    "HOST_AGENT_DATA_DIR",
    "NAMESPACE",
    "RELEASE",
    "TOKEN_PLACEHOLDER",
    "InstallPlan",
    "helm_set",
]

RELEASE = "proxima-agent"
CHART = "proxima/proxima-agent"
NAMESPACE = "proxima-system"
CHART_REPO_URL = "https://gitlab.prxm.uz/api/v4/projects/271/packages/helm/stable"
HOST_AGENT_DATA_DIR = "/var/lib/proxima-node-agent"
CHART_DEFAULT_SYNC_INTERVAL = "5m"
SECRET_NAME = "proxima-install-token"  # noqa: S105 (a Secret's name, not a secret)
SECRET_KEY = "token"  # noqa: S105
TOKEN_PLACEHOLDER = "YOUR_INSTALL_TOKEN"  # noqa: S105 (the chart page's placeholder)
VALUES_FILE = "proxima-agent-values.yaml"

_HELM_TYPED = re.compile(r"(?i)^(true|false|null|[+-]?[0-9]+)$")


def _helm_escape(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace(",", "\\,")
    return "\\" + escaped if escaped.startswith("{") else escaped


def helm_set(key: str, value: str) -> str:
    """``--set key=value`` as one shell-safe line; ``--set-string`` where Helm would retype it."""
    flag = "--set-string" if _HELM_TYPED.match(value) else "--set"
    return f"{flag} {shlex.quote(f'{key}={_helm_escape(value)}')}"


def _y(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _continued(lines: list[str]) -> str:
    return " \\\n  ".join(lines)


@dataclass(frozen=True, slots=True)
class InstallPlan:
    backend_url: str
    install_token: str
    cluster_name: str
    cluster_slug: str
    host_data_dir: str | None
    chart_version: str
    sync_interval: str = CHART_DEFAULT_SYNC_INTERVAL
    chart: str = CHART
    """What ``helm upgrade --install`` installs: ``<repo>/<chart>``, an ``oci://`` reference or
    a chart directory (the Console's ``PROXIMA_CHART_REF``)."""
    repo_url: str = CHART_REPO_URL
    """The Helm repository Argo CD pulls from (``PROXIMA_CHART_REPO_URL``)."""

    def set_values(self) -> list[tuple[str, str]]:
        values = [
            ("backendUrl", self.backend_url),
            ("installToken.value", self.install_token),
            ("clusterAgent.clusterName", self.cluster_name),
            ("clusterAgent.clusterSlug", self.cluster_slug),
        ]
        if self.sync_interval != CHART_DEFAULT_SYNC_INTERVAL:
            values.append(("clusterAgent.syncInterval", self.sync_interval))
        if self.host_data_dir:
            values.append(("nodeAgent.hostDataDir", self.host_data_dir))
        return values

    @property
    def published(self) -> bool:
        """The chart comes from a repository or a registry (not a directory): the commands pin
        ``--version`` to this Console's version, as Argo CD's ``targetRevision`` does."""
        return not self.chart.startswith((".", "/"))

    def _version_flag(self) -> list[str]:
        return [f"--version {self.chart_version}"] if self.published else []

    def helm_command(self) -> str:
        lines = [
            f"helm upgrade --install {RELEASE} {self.chart}",
            f"--namespace {NAMESPACE}",
            "--create-namespace",
            *self._version_flag(),
            *(helm_set(k, v) for k, v in self.set_values()),
        ]
        return _continued(lines)

    def argo_source(self) -> tuple[str, str]:
        """Argo CD's ``repoURL`` and ``chart``: an ``oci://`` chart reference is split into the
        registry path (Argo CD takes it without the scheme) and the chart name; otherwise the
        classic repository (``PROXIMA_CHART_REPO_URL``)."""
        if self.chart.startswith("oci://"):
            path, _, name = self.chart.removeprefix("oci://").rpartition("/")
            return path, name
        return self.repo_url, RELEASE

    def secret_commands(self) -> str:
        create = _continued(
            [
                f"kubectl -n {NAMESPACE} create secret generic {SECRET_NAME}",
                f"--from-literal={shlex.quote(f'{SECRET_KEY}={self.install_token}')}",
            ]
        )
        return f"kubectl create namespace {NAMESPACE}\n{create}"

    def _values_lines(self) -> list[str]:
        lines = [
            f"backendUrl: {_y(self.backend_url)}",
            "installToken:",
            "  existingSecret:",
            f"    name: {SECRET_NAME}",
            f"    key: {SECRET_KEY}",
            "clusterAgent:",
            f"  clusterName: {_y(self.cluster_name)}",
            f"  clusterSlug: {_y(self.cluster_slug)}",
            "  # The Console's PROXIMA_K8S_SYNC_INTERVAL: nothing reconciles the two, keep them"
            " equal.",
            f"  syncInterval: {_y(self.sync_interval)}",
        ]
        if self.host_data_dir:
            lines += [
                "nodeAgent:",
                "  # The nodes run the standalone host agent in /var/lib/proxima-agent:",
                "  # two agents must never share a data directory.",
                f"  hostDataDir: {_y(self.host_data_dir)}",
            ]
        return lines

    def values_file(self) -> str:
        return "\n".join(self._values_lines()) + "\n"

    def values_command(self) -> str:
        return _continued(
            [
                f"helm upgrade --install {RELEASE} {self.chart}",
                f"--namespace {NAMESPACE}",
                *self._version_flag(),
                f"-f {VALUES_FILE}",
            ]
        )

    def argo_application(self) -> str:
        values = "\n".join(f"        {line}" for line in self._values_lines())
        repo_url, chart = self.argo_source()
        return (
            "apiVersion: argoproj.io/v1alpha1\n"
            "kind: Application\n"
            "metadata:\n"
            f"  name: {RELEASE}\n"
            "  namespace: argocd\n"
            "spec:\n"
            "  project: default\n"
            "  source:\n"
            f"    repoURL: {repo_url}\n"
            f"    chart: {chart}\n"
            f"    targetRevision: {self.chart_version}"
            "          # pin to a published chart version\n"
            "    helm:\n"
            f"      releaseName: {RELEASE}\n"
            "      values: |\n"
            f"{values}\n"
            "  destination:\n"
            "    server: https://kubernetes.default.svc\n"
            f"    namespace: {NAMESPACE}\n"
            "  syncPolicy:\n"
            "    automated:\n"
            "      prune: true\n"
            "      selfHeal: true\n"
            "    syncOptions:\n"
            "      - CreateNamespace=true\n"
        )
