"""The flows' Helm adapter: change values of an installed release with the real ``helm`` binary.

Two ways to apply an upgrade, one interface (:class:`HelmUpgrader`):

- :class:`HelmCli` — against a real cluster: ``helm upgrade --install <release> <chart>
  --namespace <ns> --reuse-values --set key=value …``. Helm keeps the release's values and
  history; this is what an operator would type.
- :class:`RenderApply` — where helm cannot reach an API server it can install into (the
  Kubernetes API double the tests use, which serves no OpenAPI documents): ``helm template``
  renders the upgrade from the release's values (``values_files``) plus the same ``--set``, and
  the rendered workloads are written through the official Kubernetes client (replace, or create
  when missing), so the API sees a real write.

Errors::

    HelmError                 command, returncode, stderr
    └── HelmNotFoundError     the binary is not there
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import yaml

__all__ = [
    "HelmCli",
    "HelmError",
    "HelmNotFoundError",
    "HelmRelease",
    "HelmUpgrader",
    "RenderApply",
    "UpgradeResult",
    "set_args",
]

# What the hostDataDir change touches. Rendering also yields RBAC and ServiceAccounts, which do
# not change with it; a render-apply writes only these kinds.
DEFAULT_APPLY_KINDS = ("DaemonSet",)


class HelmError(RuntimeError):
    """helm exited non-zero (or the rendered output could not be applied)."""

    def __init__(self, command: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"{' '.join(command[:3])} … failed ({returncode}): {stderr.strip()}")
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr


class HelmNotFoundError(HelmError):
    def __init__(self, binary: str) -> None:
        super().__init__((binary,), 127, f"helm binary {binary!r} not found")
        self.binary = binary


@dataclass(frozen=True)
class HelmRelease:
    """Where the release lives and how to reach the cluster."""

    release: str
    chart: str
    namespace: str
    kubeconfig: str | None = None
    kube_context: str | None = None


@dataclass(frozen=True)
class UpgradeResult:
    mode: str
    command: tuple[str, ...]
    applied: tuple[str, ...] = ()
    """``Kind/namespace/name action`` per object written (render-apply only)."""
    output: str = field(default="", repr=False)


class HelmUpgrader(Protocol):
    @property
    def mode(self) -> str: ...

    def upgrade(self, release: HelmRelease, values: Mapping[str, str]) -> UpgradeResult:
        """Upgrade ``release`` keeping its values, with ``values`` set on top."""
        ...


def set_args(values: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in values.items():
        if "," in value:
            # helm splits --set on commas; a literal comma needs escaping.
            value = value.replace(",", r"\,")
        args += ["--set", f"{key}={value}"]
    return args


def _resolve(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        raise HelmNotFoundError(binary)
    return found


def _run(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(  # a fixed argv, never a shell
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise HelmError(command, -1, f"timed out after {timeout:g} s") from exc
    if done.returncode != 0:
        raise HelmError(command, done.returncode, done.stderr)
    return done


def _cluster_args(release: HelmRelease) -> list[str]:
    args: list[str] = []
    if release.kubeconfig:
        args += ["--kubeconfig", release.kubeconfig]
    if release.kube_context:
        args += ["--kube-context", release.kube_context]
    return args


@dataclass(frozen=True)
class HelmCli:
    """``helm upgrade --install … --reuse-values --set …`` against the cluster."""

    binary: str = "helm"
    timeout_seconds: float = 600.0
    extra_args: tuple[str, ...] = ()
    mode: str = "helm"

    def command(self, release: HelmRelease, values: Mapping[str, str]) -> list[str]:
        return [
            _resolve(self.binary),
            "upgrade",
            "--install",
            release.release,
            release.chart,
            "--namespace",
            release.namespace,
            "--reuse-values",
            *set_args(values),
            *_cluster_args(release),
            *self.extra_args,
        ]

    def upgrade(self, release: HelmRelease, values: Mapping[str, str]) -> UpgradeResult:
        command = self.command(release, values)
        done = _run(command, self.timeout_seconds)
        return UpgradeResult(mode=self.mode, command=tuple(command), output=done.stdout)


@dataclass(frozen=True)
class RenderApply:
    """``helm template`` with the release's values and the change, then write the rendered
    workloads through the Kubernetes API (the official client, ``api`` an ``ApiClient``)."""

    api: Any
    values_files: tuple[str, ...] = ()
    binary: str = "helm"
    kinds: tuple[str, ...] = DEFAULT_APPLY_KINDS
    timeout_seconds: float = 120.0
    mode: str = "render-apply"

    def command(self, release: HelmRelease, values: Mapping[str, str]) -> list[str]:
        files: list[str] = []
        for path in self.values_files:
            files += ["--values", path]
        return [
            _resolve(self.binary),
            "template",
            release.release,
            release.chart,
            "--namespace",
            release.namespace,
            *files,
            *set_args(values),
        ]

    def upgrade(self, release: HelmRelease, values: Mapping[str, str]) -> UpgradeResult:
        command = self.command(release, values)
        done = _run(command, self.timeout_seconds)
        docs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
        wanted = [doc for doc in docs if doc.get("kind") in self.kinds]
        if not wanted:
            raise HelmError(command, 0, f"the rendering holds no {', '.join(self.kinds)}")
        applied = tuple(self._apply(doc, release.namespace) for doc in wanted)
        return UpgradeResult(
            mode=self.mode, command=tuple(command), applied=applied, output=done.stdout
        )

    def _apply(self, doc: dict[str, Any], namespace: str) -> str:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        if doc["kind"] != "DaemonSet":
            raise HelmError(("apply",), 1, f"render-apply cannot write a {doc['kind']}")
        apps: Any = client.AppsV1Api(self.api)
        meta = doc.setdefault("metadata", {})
        ns = meta.get("namespace") or namespace
        meta["namespace"] = ns
        name = meta["name"]
        for _ in range(3):  # a stale resourceVersion (a concurrent writer) is retried
            try:
                live = apps.read_namespaced_daemon_set(name, ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                apps.create_namespaced_daemon_set(ns, doc)
                return f"DaemonSet/{ns}/{name} created"
            meta["resourceVersion"] = live.metadata.resource_version
            try:
                apps.replace_namespaced_daemon_set(name, ns, doc)
            except ApiException as exc:
                if exc.status == 409:
                    continue
                raise
            return f"DaemonSet/{ns}/{name} replaced"
        raise HelmError(("apply",), 409, f"DaemonSet/{ns}/{name} kept changing under the write")
