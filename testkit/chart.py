"""Render the proxima-agent chart with the real helm binary and look inside what it rendered."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from testkit import REPO

CHART = REPO / "chart" / "proxima-agent"
CI_VALUES = REPO / "chart" / "ci"
RELEASE = "proxima-agent"
NAMESPACE = "proxima-system"
# The oldest Kubernetes the chart supports, and the newest kubernetes-validate has schemas for.
KUBE_VERSIONS = ("1.26.0", "1.37.0")

# Helm and kubectl must never reach a cluster or a user's config from the tests.
ISOLATED_ENV_KEYS = ("HOME", "KUBECONFIG", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")


def load_tools() -> ModuleType:
    """``scripts/tools.py`` (which extracts helm and kubectl into a cache) as a module."""
    if "proxima_scripts_tools" in sys.modules:
        return sys.modules["proxima_scripts_tools"]
    spec = importlib.util.spec_from_file_location(
        "proxima_scripts_tools", REPO / "scripts" / "tools.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def helm_path() -> Path:
    """The real helm binary, extracted if needed."""
    return Path(load_tools().ensure_tool("helm").path)


class RenderError(RuntimeError):
    """helm refused to render; ``stderr`` is what it said."""

    def __init__(self, args: list[str], stderr: str) -> None:
        super().__init__(f"helm {' '.join(args)} failed:\n{stderr}")
        self.args_ = args
        self.stderr = stderr


@dataclass(frozen=True)
class Rendering:
    """The documents ``helm template`` printed, in order, and the raw text."""

    text: str
    documents: tuple[dict[str, Any], ...] = field(repr=False)

    @classmethod
    def parse(cls, text: str) -> Rendering:
        docs = tuple(doc for doc in yaml.safe_load_all(text) if doc)
        return cls(text=text, documents=docs)

    def kinds(self) -> list[str]:
        return [doc["kind"] for doc in self.documents]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.documents if doc["kind"] == kind]

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        for doc in self.all(kind):
            if doc["metadata"]["name"] == name:
                return doc
        return None

    def get(self, kind: str, name: str) -> dict[str, Any]:
        doc = self.find(kind, name)
        if doc is None:
            present = [f"{d['kind']}/{d['metadata']['name']}" for d in self.documents]
            raise AssertionError(f"no {kind}/{name} rendered; rendered: {present}")
        return doc

    # The two workloads under the page's names.
    @property
    def daemonset(self) -> dict[str, Any]:
        return self.get("DaemonSet", f"{RELEASE}-node-agent")

    @property
    def statefulset(self) -> dict[str, Any]:
        return self.get("StatefulSet", f"{RELEASE}-cluster-agent")


def pod_spec(workload: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Mapping[str, Any]) -> dict[str, Any]:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, containers
    only: dict[str, Any] = containers[0]
    return only


def env(workload: Mapping[str, Any]) -> dict[str, Any]:
    """Env vars by name: a plain value, or the ``valueFrom`` mapping."""
    result: dict[str, Any] = {}
    for var in container(workload).get("env", []):
        assert var["name"] not in result, f"{var['name']} is set twice"
        result[var["name"]] = var["value"] if "value" in var else var["valueFrom"]
    return result


def volumes(workload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {volume["name"]: volume for volume in pod_spec(workload).get("volumes", [])}


def mounts(workload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Volume mounts by mount path."""
    return {m["mountPath"]: m for m in container(workload).get("volumeMounts", [])}


def iter_values_args(
    values_files: Iterable[Path | str] = (),
    set_values: Mapping[str, Any] | None = None,
    set_strings: Mapping[str, str] | None = None,
) -> Iterator[str]:
    for path in values_files:
        yield "--values"
        yield str(path)
    for key, value in (set_values or {}).items():
        yield "--set"
        if isinstance(value, bool):
            value = "true" if value else "false"
        yield f"{key}={value}"
    for key, value in (set_strings or {}).items():
        yield "--set-string"
        yield f"{key}={value}"


class Helm:
    """The real helm binary, run without a cluster, a kubeconfig or a user's home."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.home = home
        self._cache: dict[tuple[str, ...], Rendering | RenderError] = {}

    def _env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "KUBECONFIG": str(self.home / "no-kubeconfig"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }

    def run(self, args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self._env(),
            timeout=60,
            check=False,
        )

    def template(
        self,
        values_files: Iterable[Path | str] = (),
        set_values: Mapping[str, Any] | None = None,
        *,
        set_strings: Mapping[str, str] | None = None,
        release: str = RELEASE,
        namespace: str = NAMESPACE,
        kube_version: str | None = None,
        chart: Path = CHART,
    ) -> Rendering:
        """``helm template``; raises RenderError when helm refuses. Results are memoised."""
        args = ["template", release, str(chart), "--namespace", namespace]
        if kube_version:
            args += ["--kube-version", kube_version]
        args += list(iter_values_args(values_files, set_values, set_strings))
        key = tuple(args)
        if key not in self._cache:
            done = self.run(args)
            if done.returncode == 0:
                self._cache[key] = Rendering.parse(done.stdout)
            else:
                self._cache[key] = RenderError(args, done.stderr)
        outcome = self._cache[key]
        if isinstance(outcome, RenderError):
            raise outcome
        return outcome

    def template_error(self, *a: Any, **kw: Any) -> str:
        """The stderr of a render that must fail; AssertionError if it renders."""
        try:
            self.template(*a, **kw)
        except RenderError as exc:
            return exc.stderr
        raise AssertionError("the chart rendered, but it should have refused these values")

    def notes(
        self,
        values_files: Iterable[Path | str] = (),
        set_values: Mapping[str, Any] | None = None,
        *,
        namespace: str = NAMESPACE,
    ) -> str:
        """NOTES.txt as ``helm install --dry-run=client`` prints it (no cluster needed)."""
        args = [
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            namespace,
            "--dry-run=client",
            *iter_values_args(values_files, set_values),
        ]
        done = self.run(args)
        if done.returncode != 0:
            raise RenderError(args, done.stderr)
        _, sep, notes = done.stdout.partition("\nNOTES:\n")
        assert sep, f"no NOTES in:\n{done.stdout[-2000:]}"
        return notes

    def lint(self, values_files: Iterable[Path | str] = (), *, strict: bool = True) -> str:
        args = ["lint", str(CHART), "--namespace", NAMESPACE]
        if strict:
            args.append("--strict")
        args += list(iter_values_args(values_files))
        done = self.run(args)
        if done.returncode != 0:
            raise RenderError(args, done.stdout + done.stderr)
        return done.stdout
