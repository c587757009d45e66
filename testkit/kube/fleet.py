"""A deterministic cluster of realistic size: nodes, namespaces, workloads and their pods.

`build_fleet(FleetSpec(pods=5000))` returns the objects and a `Fleet` summary (what exists, so
tests can assert on counts without listing); `preload_fleet(double)` puts them into a running
double. The same spec always yields the same objects. Pods are exactly `spec.pods`:

- kube-system: static control-plane pods (owner: Node), kube-proxy and a CNI DaemonSet (one
  pod per node), coredns and metrics-server Deployments;
- application namespaces, round-robin: Deployments (→ ReplicaSet → pods), StatefulSets,
  Argo Rollouts (→ ReplicaSet → pods), CronJobs (→ Jobs → Succeeded pods), and a Service for
  each long-running workload;
- pod phases: mostly Running; every 97th long-running pod Pending (unscheduled), every 131st
  Failed, job pods Succeeded.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from testkit.kube import objects as o

if TYPE_CHECKING:
    from testkit.kube.server import KubeApiDouble

_APP_NAMESPACES = (
    "payments",
    "checkout",
    "catalog",
    "search",
    "identity",
    "orders",
    "shipping",
    "billing",
    "notifications",
    "analytics",
    "reporting",
    "media",
    "frontend",
    "gateway",
    "inventory",
    "pricing",
    "reviews",
    "recommendations",
    "messaging",
    "observability",
)
_ROLES = ("api", "worker", "web", "cache", "sync", "gateway")
_REPLICA_PATTERN = (3, 2, 5, 1, 4, 8, 2, 6, 3, 10, 2, 4)
_IMAGES = (
    "ghcr.io/example/api:1.14.2",
    "ghcr.io/example/worker:3.2.0",
    "nginx:1.27",
    "ghcr.io/example/web:2.4.0",
    "redis:7.4",
)


@dataclass(frozen=True)
class FleetSpec:
    pods: int = 5000
    nodes: int = 50
    control_plane_nodes: int = 3
    app_namespaces: int = 20
    rollouts: int = 12  # Argo Rollouts among the application workloads
    node_prefix: str = "node"


@dataclass(frozen=True)
class Fleet:
    """What a preloaded fleet holds."""

    spec: FleetSpec
    nodes: tuple[str, ...]
    namespaces: tuple[str, ...]  # every namespace, kube-system first
    counts: Mapping[str, int]  # kind → number of objects
    pods_by_namespace: Mapping[str, int]
    pods_by_phase: Mapping[str, int] = field(default_factory=dict)

    def pods_outside(self, excluded: set[str] | frozenset[str]) -> int:
        return sum(n for ns, n in self.pods_by_namespace.items() if ns not in excluded)


def _suffix(index: int) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    chars = []
    for _ in range(5):
        index, digit = divmod(index, len(alphabet))
        chars.append(alphabet[digit])
    return "".join(chars)


class _Builder:
    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.objects: list[dict[str, Any]] = []
        self.budget = spec.pods
        self.pod_index = 0
        self.service_index = 0
        self.nodes = [f"{spec.node_prefix}-{i:03d}" for i in range(spec.nodes)]
        cp = max(0, min(spec.control_plane_nodes, spec.nodes - 1 if spec.nodes > 1 else 0))
        self.control_plane = self.nodes[:cp]
        self.workers = self.nodes[cp:] or self.nodes

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects.append(obj)
        return obj

    def take(self, wanted: int) -> int:
        granted = max(0, min(wanted, self.budget))
        self.budget -= granted
        return granted

    def pod(
        self,
        name: str,
        namespace: str,
        *,
        template: Mapping[str, Any],
        owner: Mapping[str, Any],
        node: str | None = None,
        phase: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        i = self.pod_index
        self.pod_index += 1
        if phase is None:
            phase = "Pending" if i % 97 == 96 else "Failed" if i % 131 == 130 else "Running"
        if node is None and phase != "Pending":
            node = self.workers[i % len(self.workers)]
        self.add(
            o.pod(
                name,
                namespace,
                node_name=node,
                owner=o.owner_reference(owner),
                phase=phase,
                template=template,
                labels=labels,
                restarts=i % 4 if phase == "Running" else 0,
                index=i,
            )
        )

    def pods_of(
        self,
        owner: Mapping[str, Any],
        count: int,
        *,
        template_owner: Mapping[str, Any] | None = None,
    ) -> None:
        """`count` pods owned by `owner` (a ReplicaSet, StatefulSet or Job)."""
        meta = owner["metadata"]
        template = (template_owner or owner)["spec"]["template"]
        for n in range(count):
            if owner["kind"] == "StatefulSet":
                name = f"{meta['name']}-{n}"
                labels = {
                    "statefulset.kubernetes.io/pod-name": name,
                    "apps.kubernetes.io/pod-index": str(n),
                }
            else:
                name = f"{meta['name']}-{_suffix(self.pod_index)}"
                labels = dict(meta.get("labels", {}))
            self.pod(
                name,
                meta["namespace"],
                template=template,
                owner=owner,
                labels=labels,
                phase="Succeeded" if owner["kind"] == "Job" else None,
            )

    def build(self) -> Fleet:
        spec = self.spec
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.add(o.namespace(ns))
        app_namespaces = [
            _APP_NAMESPACES[i % len(_APP_NAMESPACES)]
            + (f"-{i // len(_APP_NAMESPACES)}" if i >= len(_APP_NAMESPACES) else "")
            for i in range(spec.app_namespaces)
        ]
        for ns in app_namespaces:
            self.add(o.namespace(ns, labels={"team": ns.split("-")[0]}))
        node_objs = []
        for i, name in enumerate(self.nodes):
            node_objs.append(
                self.add(
                    o.node(
                        name,
                        index=i,
                        control_plane=name in self.control_plane,
                        zone=f"zone-{'abc'[i % 3]}",
                    )
                )
            )
        self._kube_system(node_objs)
        self._applications(app_namespaces)
        kinds = Counter(obj["kind"] for obj in self.objects)
        pods = [obj for obj in self.objects if obj["kind"] == "Pod"]
        return Fleet(
            spec=spec,
            nodes=tuple(self.nodes),
            namespaces=(
                "kube-system",
                "default",
                "kube-public",
                "kube-node-lease",
                *app_namespaces,
            ),
            counts=dict(kinds),
            pods_by_namespace=dict(Counter(p["metadata"]["namespace"] for p in pods)),
            pods_by_phase=dict(Counter(p["status"]["phase"] for p in pods)),
        )

    def _kube_system(self, node_objs: list[dict[str, Any]]) -> None:
        ns = "kube-system"
        for node in node_objs:
            name = node["metadata"]["name"]
            if name not in self.control_plane:
                continue
            for component, image in (
                ("etcd", "registry.k8s.io/etcd:3.5.21-0"),
                ("kube-apiserver", "registry.k8s.io/kube-apiserver:v1.33.1"),
                ("kube-controller-manager", "registry.k8s.io/kube-controller-manager:v1.33.1"),
                ("kube-scheduler", "registry.k8s.io/kube-scheduler:v1.33.1"),
            ):
                if self.take(1):
                    template = o.pod_template(
                        {"component": component, "tier": "control-plane"},
                        [o.container(component, image)],
                        host_network=True,
                    )
                    self.pod(
                        f"{component}-{name}",
                        ns,
                        template=template,
                        owner=node,
                        node=name,
                        phase="Running",
                    )
        for ds_name, image in (
            ("kube-proxy", "registry.k8s.io/kube-proxy:v1.33.1"),
            ("cilium", "quay.io/cilium/cilium:v1.17.4"),
        ):
            ds = self.add(
                o.daemonset(ds_name, ns, desired=len(self.nodes), image=image, host_network=True)
            )
            for node_name in self.nodes[: self.take(len(self.nodes))]:
                self.pod(
                    f"{ds_name}-{_suffix(self.pod_index)}",
                    ns,
                    template=ds["spec"]["template"],
                    owner=ds,
                    node=node_name,
                    phase="Running",
                )
        for dep_name, replicas, image in (
            ("coredns", 2, "registry.k8s.io/coredns/coredns:v1.12.0"),
            ("metrics-server", 1, "registry.k8s.io/metrics-server/metrics-server:v0.7.2"),
        ):
            self._deployment(dep_name, ns, replicas, image)
        self.add(
            o.service(
                "kube-dns",
                ns,
                selector={"app.kubernetes.io/name": "coredns"},
                ports=(53,),
                target_port=53,
                index=self._next_service(),
            )
        )

    def _next_service(self) -> int:
        self.service_index += 1
        return self.service_index

    def _deployment(self, name: str, ns: str, replicas: int, image: str) -> None:
        count = self.take(replicas)
        dep = self.add(o.deployment(name, ns, replicas=replicas, image=image))
        rs = self.add(o.replicaset(dep, replicas=replicas))
        self.pods_of(rs, count)

    def _applications(self, namespaces: list[str]) -> None:
        if not namespaces:
            return
        rollouts_left = self.spec.rollouts
        for i in itertools.count():
            if self.budget <= 0:
                break
            ns = namespaces[i % len(namespaces)]
            replicas = _REPLICA_PATTERN[i % len(_REPLICA_PATTERN)]
            image = _IMAGES[i % len(_IMAGES)]
            role = _ROLES[i // len(namespaces) % len(_ROLES)]
            name = f"{ns.split('-')[0]}-{role}-{i // (len(namespaces) * len(_ROLES))}"
            if i % 9 == 4:
                cj = self.add(o.cronjob(f"{name}-report", ns))
                for run in range(2):
                    jb = self.add(o.job(f"{name}-report-{29000000 + run}", ns, owner=cj))
                    self.pods_of(jb, self.take(1))
                continue
            if i % 7 == 3:
                sts = self.add(o.statefulset(name, ns, replicas=min(replicas, 3)))
                self.pods_of(sts, self.take(min(replicas, 3)))
                self.add(o.service(name, ns, ports=(5432,), target_port=5432, headless=True))
                continue
            if rollouts_left > 0 and i % 5 == 1:
                rollouts_left -= 1
                ro = self.add(o.rollout(name, ns, replicas=replicas, image=image))
                rs = self.add(o.replicaset(ro))
                self.pods_of(rs, self.take(replicas), template_owner=rs)
            else:
                self._deployment(name, ns, replicas, image)
            self.add(o.service(name, ns, index=self._next_service()))


def build_fleet(spec: FleetSpec | None = None) -> tuple[Fleet, list[dict[str, Any]]]:
    builder = _Builder(spec or FleetSpec())
    fleet = builder.build()
    return fleet, builder.objects


def preload_fleet(double: KubeApiDouble, spec: FleetSpec | None = None) -> Fleet:
    """Build the fleet and put it into `double` (bypassing the API: no auth, faults or log)."""
    fleet, objects = build_fleet(spec)
    double.put_many(objects, copy_objects=False)
    return fleet
