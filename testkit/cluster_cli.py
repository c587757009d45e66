"""helm and kubectl against the ``tests/cluster`` control plane, as an operator runs them.

``ClusterCli(cluster, helm, kubectl, home)`` runs the real binaries with the cluster's admin
kubeconfig and an empty helm home, and offers the few reads the lane's tests share: JSON gets,
pods by owner, events, and ``kubectl auth can-i --list`` parsed into rows.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.chart import CHART, RELEASE
from testkit.cluster import KubeCluster


class CliError(AssertionError):
    """A helm or kubectl command failed: the message quotes the command and its output."""


@dataclass(frozen=True)
class CanI:
    """One row of ``kubectl auth can-i --list``."""

    resource: str  # "leases.coordination.k8s.io", "pods", "nodes/stats", "/api" (URLs)
    resource_names: tuple[str, ...]
    verbs: tuple[str, ...]


class ClusterCli:
    def __init__(self, cluster: KubeCluster, helm: Path, kubectl: Path, home: Path) -> None:
        self.cluster = cluster
        self.helm_binary = helm
        self.kubectl_binary = kubectl
        self.home = home

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.admin_kubeconfig),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }

    def _run(
        self, binary: Path, args: Iterable[str], check: bool, timeout: float, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(binary), *args]
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise CliError(
                f"{' '.join(argv)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def helm(
        self, *args: str, check: bool = True, timeout: float = 300, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        return self._run(self.helm_binary, args, check, timeout, stdin)

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        return self._run(self.kubectl_binary, args, check, timeout, stdin)

    def apply(self, *objects: dict[str, Any], namespace: str | None = None) -> None:
        """``kubectl apply`` of the given objects."""
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        self.kubectl(*args, stdin=body)

    # -- helm, the way the page runs it -----------------------------------------------------

    def install(
        self,
        namespace: str,
        *values: str,
        release: str = RELEASE,
        wait: bool = True,
        check: bool = True,
        create_namespace: bool = True,
        verb: str = "install",
    ) -> subprocess.CompletedProcess[str]:
        """``helm install|upgrade <release> chart/proxima-agent -n <ns>`` from the directory."""
        args = [verb, release, str(CHART), "--namespace", namespace]
        if create_namespace and verb == "install":
            args.append("--create-namespace")
        if wait:
            args += ["--wait", "--timeout", "180s"]
        try:
            return self.helm(*args, *values, check=check)
        except CliError as exc:
            if not wait:
                raise
            raise CliError(f"{exc}\n{self.workload_report(namespace)}") from exc

    def workload_report(self, namespace: str) -> str:
        """What a ``--wait`` that timed out was waiting for: the namespace's workloads and each
        pod that is not Ready (phase, node, conditions), for the failure message."""
        lines = [f"workloads in {namespace}:"]
        workloads = self.kubectl(
            "get", "daemonsets,deployments,statefulsets", "-n", namespace, "-o", "wide", check=False
        )
        lines.append(workloads.stdout.strip() or workloads.stderr.strip())
        listing = self.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
        try:
            pods = json.loads(listing.stdout)["items"]
        except (ValueError, KeyError):
            return "\n".join([*lines, f"pods: {listing.stderr.strip()}"])
        for pod in pods:
            status = pod.get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conditions.get("Ready") != "True":
                name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
                lines.append(
                    f"not Ready: {name} on {node} phase={status.get('phase')} "
                    f"conditions={conditions}"
                )
                lines += [f"  kwok: {line}" for line in self._kwok_lines(name, node)]
        return "\n".join(lines)

    def _kwok_lines(self, *words: str | None, last: int = 12) -> list[str]:
        """kwok's log lines that name the pod or its node (kwok plays every node's kubelet)."""
        log = self.cluster.workdir / "logs" / "kwok.log"
        try:
            text = log.read_text(errors="replace")
        except OSError:
            return []
        wanted = [w for w in words if w]
        return [line for line in text.splitlines() if any(w in line for w in wanted)][-last:]

    def uninstall(self, namespace: str, release: str = RELEASE) -> None:
        self.helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout", "120s")

    # -- kubectl reads -----------------------------------------------------------------------

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def items(self, *args: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get(*args)["items"]
        return found

    def pods_of(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """The pods whose controller is ``kind/name``."""
        return [
            pod
            for pod in self.items("pods", "-n", namespace)
            if any(
                ref.get("controller") and ref["kind"] == kind and ref["name"] == name
                for ref in pod["metadata"].get("ownerReferences", [])
            )
        ]

    def events(self, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
        events = self.items("events", "-n", namespace)
        return [e for e in events if reason is None or e.get("reason") == reason]

    def service_account_env(self, namespace: str, account: str, path: Path) -> dict[str, str]:
        """``KUBECONFIG`` for a kubeconfig (written at ``path``) holding a token the real issuer
        minted for ``account`` (TokenRequest, through ``kubectl create token``)."""
        token = self.kubectl(
            "create", "token", account, "-n", namespace, "--duration=1h"
        ).stdout.strip()
        return {"KUBECONFIG": str(self.cluster.write_kubeconfig(path, token=token))}

    def can_i_list(self, user: str, namespace: str) -> list[CanI]:
        """``kubectl auth can-i --list --as=<user> -n <namespace>``, parsed."""
        out = self.kubectl("auth", "can-i", "--list", f"--as={user}", "-n", namespace).stdout
        return parse_can_i(out)


def parse_can_i(text: str) -> list[CanI]:
    """Rows of the table kubectl prints: Resources, Non-Resource URLs, Resource Names, Verbs.

    A resource row starts with its resource; a non-resource row starts with blanks and its URL
    sits in brackets in the second column (it is returned as the row's ``resource``).
    """
    rows = []
    for line in text.splitlines()[1:]:
        if not line.strip():
            continue
        resource = "" if line[0].isspace() else line.split()[0]
        urls, names, verbs = _bracket_groups(line[len(resource) :])
        rows.append(CanI(resource or " ".join(urls), tuple(names), tuple(verbs)))
    return rows


def _bracket_groups(text: str) -> list[list[str]]:
    groups: list[list[str]] = []
    for chunk in text.split("]"):
        if "[" in chunk:
            inside = chunk.split("[", 1)[1].strip()
            groups.append(inside.split() if inside else [])
    return groups
