"""What the onboarding wizard tells the operator to run: the chart repository's login, the
``helm upgrade --install`` command, the values-file variant and the Argo CD Application
(docs/chart.md; the chart's page's "Add the Helm Repository", Quick Start, "Using an Existing
Secret" and "GitOps (Argo CD)").

The chart comes from the Console's ``PROXIMA_CHART_REF``: ``<repo>/<chart>`` from the classic
repository ``PROXIMA_CHART_REPO_URL`` (which has no default: a Console that names none has the
commands install the chart's directory of this release and says how to name one), an
``oci://`` reference, or a chart directory. Both repositories want credentials, as the page's
does; the commands read them with ``read -rs`` into a variable and hand helm the password on
stdin (``--password-stdin``), so it is in neither the shell's history nor any argv.

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
from typing import Literal

__all__ = [
    "ARGO_REPO_SECRET",
    "CHART",
    "CHART_DIRECTORY",
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
CHART_DIRECTORY = "./chart/proxima-agent"  # in a checkout of this release
HOST_AGENT_DATA_DIR = "/var/lib/proxima-node-agent"
CHART_DEFAULT_SYNC_INTERVAL = "5m"
SECRET_NAME = "proxima-install-token"  # noqa: S105 (a Secret's name, not a secret)
SECRET_KEY = "token"  # noqa: S105
TOKEN_PLACEHOLDER = "YOUR_INSTALL_TOKEN"  # noqa: S105 (the chart page's placeholder)
VALUES_FILE = "proxima-agent-values.yaml"
ARGO_REPO_SECRET = "proxima-chart-repository"  # noqa: S105 (a Secret's name)
#: What the node agent's namespace needs (hostPath, root): Argo CD's CreateNamespace=true makes
#: a namespace with no label, which a cluster whose Pod Security default is baseline or
#: restricted refuses the DaemonSet's pods in.
POD_SECURITY_LABEL = ("pod-security.kubernetes.io/enforce", "privileged")
_READ_CREDENTIALS = (
    "read -rp 'Deploy token name: ' PROXIMA_REPO_USER\n"
    "read -rsp 'Deploy token: ' PROXIMA_REPO_TOKEN; echo\n"
)

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
    repo_url: str | None = None
    """The classic Helm repository ``<repo>/<chart>`` comes from (``PROXIMA_CHART_REPO_URL``);
    None: the Console names none."""

    @property
    def kind(self) -> Literal["repo", "oci", "directory"]:
        if self.chart.startswith("oci://"):
            return "oci"
        if self.chart.startswith((".", "/")) or self.chart.count("/") != 1:
            return "directory"
        return "repo"

    @property
    def repo_unset(self) -> bool:
        """``PROXIMA_CHART_REF`` names a repository chart, but no repository is configured:
        the commands install the chart's directory instead, and the page says how to set it."""
        return self.kind == "repo" and not self.repo_url

    @property
    def install_chart(self) -> str:
        return CHART_DIRECTORY if self.repo_unset else self.chart

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
        return self.kind != "directory" and not self.repo_unset

    def _version_flag(self) -> list[str]:
        return [f"--version {self.chart_version}"] if self.published else []

    def helm_command(self) -> str:
        lines = [
            f"helm upgrade --install {RELEASE} {self.install_chart}",
            f"--namespace {NAMESPACE}",
            "--create-namespace",
            *self._version_flag(),
            *(helm_set(k, v) for k, v in self.set_values()),
        ]
        return _continued(lines)

    def login_commands(self) -> str | None:
        """The repository's login, credentials read without echo and passed on stdin: ``helm
        repo add`` for the classic repository, ``helm registry login`` for an OCI registry;
        None for a chart directory."""
        if self.kind == "oci":
            host = self.chart.removeprefix("oci://").split("/")[0]
            return (
                _READ_CREDENTIALS + f"printf '%s' \"$PROXIMA_REPO_TOKEN\" | helm registry login "
                f"{shlex.quote(host)} \\\n"
                '  --username "$PROXIMA_REPO_USER" --password-stdin\n'
                "unset PROXIMA_REPO_TOKEN"
            )
        if self.kind != "repo" or not self.repo_url:
            return None
        alias = self.chart.split("/")[0]
        return (
            _READ_CREDENTIALS + f"printf '%s' \"$PROXIMA_REPO_TOKEN\" | helm repo add {alias} "
            f"{shlex.quote(self.repo_url)} \\\n"
            '  --username "$PROXIMA_REPO_USER" --password-stdin\n'
            f"unset PROXIMA_REPO_TOKEN\nhelm repo update {alias}"
        )

    def argo_source(self) -> tuple[str, str] | None:
        """Argo CD's ``repoURL`` and ``chart``: an ``oci://`` chart reference is split into the
        registry path (Argo CD takes it without the scheme) and the chart name; otherwise the
        classic repository (``PROXIMA_CHART_REPO_URL``). None where nothing is published."""
        if self.kind == "oci":
            path, _, name = self.chart.removeprefix("oci://").rpartition("/")
            return path, name
        if self.kind == "repo" and self.repo_url:
            return self.repo_url, RELEASE
        return None

    def argo_repository_commands(self) -> str | None:
        """Argo CD's repository credentials as its declarative Secret (label
        ``argocd.argoproj.io/secret-type=repository``) in the ``argocd`` namespace; the
        password goes to kubectl on stdin (``--from-file=password=/dev/stdin``)."""
        source = self.argo_source()
        if source is None:
            return None
        url = source[0]
        oci = ["--from-literal=enableOCI=true"] if self.kind == "oci" else []
        create = _continued(
            [
                f"printf '%s' \"$PROXIMA_REPO_TOKEN\" | kubectl -n argocd create secret generic "
                f"{ARGO_REPO_SECRET}",
                "--from-literal=type=helm",
                f"--from-literal=name={RELEASE}",
                f"--from-literal={shlex.quote(f'url={url}')}",
                *oci,
                '--from-literal=username="$PROXIMA_REPO_USER"',
                "--from-file=password=/dev/stdin",
            ]
        )
        return (
            f"{_READ_CREDENTIALS}{create}\nunset PROXIMA_REPO_TOKEN\n"
            f"kubectl -n argocd label secret {ARGO_REPO_SECRET} "
            "argocd.argoproj.io/secret-type=repository"
        )

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
                f"helm upgrade --install {RELEASE} {self.install_chart}",
                f"--namespace {NAMESPACE}",
                *self._version_flag(),
                f"-f {VALUES_FILE}",
            ]
        )

    def argo_application(self) -> str | None:
        """The page's Application, its namespace labelled for the node agent by Argo CD
        (``managedNamespaceMetadata``: ``CreateNamespace=true`` alone makes it unlabelled).
        None where nothing is published (Argo CD cannot install a local directory)."""
        source = self.argo_source()
        if source is None:
            return None
        repo_url, chart = source
        values = "\n".join(f"        {line}" for line in self._values_lines())
        label, level = POD_SECURITY_LABEL
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
            "    managedNamespaceMetadata:"
            "     # the node agent (hostPath, root) needs a privileged namespace\n"
            "      labels:\n"
            f"        {label}: {level}\n"
        )
