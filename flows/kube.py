"""The flows' Kubernetes adapter: the official client, loaded from a kubeconfig or in-cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from flows.audit_rules import DaemonSetFact

AGENT_SELECTOR = "app.kubernetes.io/name=proxima-agent"
NODE_AGENT_SELECTOR = f"{AGENT_SELECTOR},app.kubernetes.io/component=node-agent"


@dataclass(frozen=True)
class KubeTarget:
    kubeconfig: str | None = None
    context: str | None = None


def discover_target(kubeconfig: str | None) -> tuple[KubeTarget | None, str]:
    """Where the flows find a cluster without being told: the ``kubeconfig`` parameter, else the
    worker's ``KUBECONFIG``, else the ServiceAccount of a worker running in a pod. Returns the
    target (or None) and a sentence saying which, for the audit's record."""
    if kubeconfig:
        return KubeTarget(kubeconfig=kubeconfig), f"kubeconfig {kubeconfig}"
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return KubeTarget(kubeconfig=env), f"the worker's KUBECONFIG ({env})"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return KubeTarget(), "the worker's in-cluster ServiceAccount"
    return None, (
        "no kubeconfig parameter, no KUBECONFIG on the worker, and the worker does not run in a pod"
    )


def api_client(target: KubeTarget) -> Any:
    from kubernetes import client, config

    loader: Any = config
    if target.kubeconfig:
        return loader.new_client_from_config(config_file=target.kubeconfig, context=target.context)
    loader.load_incluster_config()
    return client.ApiClient()


def node_names(api: Any) -> list[str]:
    from kubernetes import client

    items: list[Any] = client.CoreV1Api(api).list_node().items
    return sorted(str(n.metadata.name) for n in items)


@dataclass(frozen=True)
class NodeAgentCoverage:
    """How many node agents a cluster should have: the nodes, and how many of them the node-agent
    DaemonSets are scheduled on as their controller counts it (``desiredNumberScheduled``: the
    nodeSelector, affinity and taints decided by Kubernetes itself)."""

    nodes: int
    scheduled: int | None
    """``None``: no node-agent DaemonSet found, or its controller has not counted yet (every
    node is then counted)."""

    @property
    def expected(self) -> int:
        return self.nodes if self.scheduled is None else self.scheduled


def node_agent_coverage(api: Any) -> NodeAgentCoverage:
    from kubernetes import client

    daemonsets: list[Any] = (
        client.AppsV1Api(api)
        .list_daemon_set_for_all_namespaces(label_selector=NODE_AGENT_SELECTOR)
        .items
    )
    synced = all(
        ds.status is not None
        and ds.status.observed_generation is not None
        and ds.status.observed_generation >= (ds.metadata.generation or 0)
        for ds in daemonsets
    )
    scheduled = None
    if daemonsets and synced:  # else the controller has not counted yet: every node counts
        scheduled = sum(int(ds.status.desired_number_scheduled or 0) for ds in daemonsets)
    return NodeAgentCoverage(nodes=len(node_names(api)), scheduled=scheduled)


def agent_daemonsets(api: Any, namespace: str | None = None) -> list[DaemonSetFact]:
    """The node-agent DaemonSets and the host path of their ``data`` volume."""
    from kubernetes import client

    apps = client.AppsV1Api(api)
    listing = (
        apps.list_namespaced_daemon_set(namespace, label_selector=AGENT_SELECTOR)
        if namespace
        else apps.list_daemon_set_for_all_namespaces(label_selector=AGENT_SELECTOR)
    )
    nodes = tuple(node_names(api))
    facts = []
    daemonsets: list[Any] = listing.items
    for ds in daemonsets:
        path = None
        for volume in ds.spec.template.spec.volumes or []:
            if volume.name == "data" and volume.host_path is not None:
                path = volume.host_path.path
        facts.append(DaemonSetFact(str(ds.metadata.namespace), str(ds.metadata.name), path, nodes))
    return facts
