"""``enrollment-check``: what the onboarding wizard verifies, as a flow.

For a cluster slug, wait — with a deadline and a live progress artifact — for the cluster
agent's enrollment, its first heartbeat and the first inventory sync; count the node agents that
enrolled against the nodes that exist. End with a pass/fail report naming what is missing and the
likely cause from the seed's Common Issues table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)

from flows.console_client import ConsoleApiError, ConsoleClient
from flows.kube import KubeTarget, api_client, node_names
from flows.settings import FlowSettings

CAUSES = {
    "enrollment": (
        "Cluster not appearing in Console — collector not enrolling",
        "check the cluster agent's logs for enrollment errors (kubectl -n proxima-system logs "
        "statefulset/proxima-agent-cluster-agent | grep enrolled) and verify the install token; "
        "`connection refused` to the backend means a wrong backendUrl or an egress rule; "
        "ImagePullBackOff means a private registry without imagePullSecrets",
    ),
    "heartbeat": (
        "The collector enrolled but does not heartbeat",
        "check NATS connectivity: kubectl -n proxima-system logs "
        "statefulset/proxima-agent-cluster-agent | grep nats",
    ),
    "inventory": (
        "No inventory sync yet",
        "the leader collects every clusterAgent.syncInterval; check its logs for API errors "
        "(forbidden to read …) and that clusterAgent.clusterSlug matches the Console's slug",
    ),
    "nodes": (
        "Node agents missing",
        "check the DaemonSet: kubectl -n proxima-system get pods; a 409 in its logs after a "
        "hostDataDir change needs release-identity (docs/identity.md); kubelet metrics need "
        "hostMetrics: true and the ClusterRole",
    ),
}


@dataclass
class CheckState:
    enrollment: bool = False
    heartbeat: bool = False
    inventory: bool = False
    node_agents: int = 0
    nodes: int | None = None
    collector: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def nodes_ok(self) -> bool:
        return self.nodes is None or self.node_agents >= self.nodes

    def done(self) -> int:
        return sum([self.enrollment, self.heartbeat, self.inventory, self.nodes_ok])


def observe(cluster: dict[str, Any] | None, node_agents: int, nodes: int | None) -> CheckState:
    state = CheckState(node_agents=node_agents, nodes=nodes)
    if cluster is None:
        return state
    collectors = cluster.get("agents") or []
    state.enrollment = bool(collectors)
    if collectors:
        state.collector = collectors[0]["name"]
    state.heartbeat = any(
        a.get("sync_interval_seconds") is not None or a.get("leader") is not None
        for a in collectors
    )
    state.inventory = cluster.get("first_inventory_at") is not None
    for w in cluster.get("warnings", ()):
        state.notes.append(f"{w['kind']}: {w['message']}")
    return state


@task(name="count-nodes", retries=2, retry_delay_seconds=2)
def count_nodes(kubeconfig: str | None) -> int:
    return len(node_names(api_client(KubeTarget(kubeconfig=kubeconfig))))


@task(name="wait-for-enrollment")
def wait_for_enrollment(
    slug: str, deadline_seconds: float, poll_seconds: float, nodes: int | None
) -> dict[str, Any]:
    log = get_run_logger()
    progress = create_progress_artifact(
        0.0, key=f"enrollment-check-{slug[:40]}", description=f"Enrollment check of {slug}"
    )
    assert isinstance(progress, UUID)  # sync context: the id, not a coroutine
    deadline = time.monotonic() + deadline_seconds
    last = -1
    state = CheckState()
    with ConsoleClient(FlowSettings()) as console:
        while True:
            try:
                cluster: dict[str, Any] | None = console.cluster(slug)
            except ConsoleApiError as exc:
                if exc.status != 404:
                    raise
                cluster = None
            node_agents = 0
            if cluster is not None:
                by_slug = [
                    a
                    for a in console.agents(agent_type="k8s-node-monitor", status="online")
                    if a.get("cluster_slug") == slug
                ]
                node_agents = max(len(by_slug), int(cluster.get("node_agents") or 0))
            state = observe(cluster, node_agents, nodes)
            if state.done() != last:
                update_progress_artifact(progress, 100 * state.done() / 4, description=_line(state))
                log.info("%s", _line(state))
                last = state.done()
            if state.done() == 4 or time.monotonic() > deadline:
                break
            time.sleep(poll_seconds)
    return {
        "enrollment": state.enrollment,
        "heartbeat": state.heartbeat,
        "inventory": state.inventory,
        "node_agents": state.node_agents,
        "nodes": state.nodes,
        "collector": state.collector,
        "notes": state.notes,
    }


def _line(s: CheckState) -> str:
    mark = {True: "ok", False: "waiting"}
    nodes = f"{s.node_agents}/{s.nodes}" if s.nodes is not None else f"{s.node_agents}"
    return (
        f"enrollment {mark[s.enrollment]}, heartbeat {mark[s.heartbeat]}, first inventory "
        f"{mark[s.inventory]}, node agents {nodes}"
    )


def report(slug: str, result: dict[str, Any]) -> tuple[bool, str]:
    lines = [f"# Enrollment check: {slug}", ""]
    missing = []
    for step in ("enrollment", "heartbeat", "inventory"):
        ok = result[step]
        lines.append(f"- {'✅' if ok else '❌'} {step}")
        if not ok:
            missing.append(step)
    nodes = result["nodes"]
    if nodes is not None:
        ok = result["node_agents"] >= nodes
        lines.append(f"- {'✅' if ok else '❌'} node agents {result['node_agents']}/{nodes}")
        if not ok:
            missing.append("nodes")
    if missing:
        first = missing[0]
        title, fix = CAUSES[first]
        lines += [
            "",
            f"**Missing: {', '.join(missing)}.** Likely cause: {title}.",
            "",
            f"Fix: {fix}",
        ]
    if result["notes"]:
        lines += ["", "Warnings:"] + [f"- {n}" for n in result["notes"]]
    return not missing, "\n".join(lines)


@flow(name="enrollment-check")
def enrollment_check(
    cluster_slug: str,
    deadline_seconds: float = 600,
    poll_seconds: float = 2,
    kubeconfig: str | None = None,
    check_nodes: bool = False,
) -> dict[str, Any]:
    """Wait for a cluster's collector to enroll, heartbeat and sync; count node agents."""
    nodes = count_nodes(kubeconfig) if check_nodes else None
    result = wait_for_enrollment(cluster_slug, deadline_seconds, poll_seconds, nodes)
    passed, text = report(cluster_slug, result)
    create_markdown_artifact(
        text,
        key=f"enrollment-check-{cluster_slug[:40]}-report",
        description="pass" if passed else "fail",
    )
    get_run_logger().info("%s", text)
    return {**result, "passed": passed, "report": text}
