"""``enrollment-check``: what the onboarding wizard verifies, as a flow.

For a cluster slug, wait — with a deadline and a live progress artifact — for the cluster
agent's enrollment, its first heartbeat and the first inventory sync, as the Console judges them
(``GET /api/v1/clusters/{slug}/onboarding``: the gates the web wizard shows, one
implementation); count the node agents that enrolled against the nodes the node-agent
DaemonSet is scheduled on, as its controller counts them (read from Kubernetes on every poll;
every node where no such DaemonSet exists). End with a pass/fail report naming what is missing
and the likely cause from the chart page's Common Issues table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar
from uuid import UUID

import httpx
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.states import Failed

from contracts.views import ClusterView, OnboardingStatus
from flows.console_client import ConsoleApiError, ConsoleClient, ConsoleUnavailable
from flows.kube import KubeTarget, NodeAgentCoverage, api_client, node_agent_coverage
from flows.settings import FlowSettings

T = TypeVar("T")

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
    "registered": (
        "No cluster with this slug in the Console",
        "register the cluster first (the Console's /clusters/add wizard, or POST "
        "/api/v1/clusters), or pass the slug the Console shows for it; the worker's token must "
        "belong to the cluster's environment",
    ),
    "nodes": (
        "Node agents missing",
        "check the DaemonSet: kubectl -n proxima-system get pods; a 409 in its logs after a "
        "hostDataDir change needs release-identity (docs/identity.md); kubelet metrics need "
        "hostMetrics: true and the ClusterRole",
    ),
}


GATES = ("enrollment", "heartbeat", "inventory")
"""The Console's onboarding gates, in order (``GET /api/v1/clusters/{slug}/onboarding``)."""


@dataclass
class CheckState:
    """Where a cluster's onboarding stands: the Console's three gates (as its wizard shows
    them), and the node agents expected, the one thing only the cluster knows."""

    registered: bool = True
    """False: the Console has no cluster with this slug (its onboarding answered 404)."""
    enrollment: bool = False
    heartbeat: bool = False
    inventory: bool = False
    node_agents: int = 0
    nodes: int | None = None
    """Node agents expected: the nodes the node-agent DaemonSets are scheduled on."""
    cluster_nodes: int | None = None
    """Every node of the cluster (some may by design run no node agent: nodeSelector, taints)."""
    collector: str | None = None
    notes: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    """The Console's detail of each pending gate."""

    @property
    def nodes_ok(self) -> bool:
        return self.nodes is None or self.node_agents >= self.nodes

    def done(self) -> int:
        return sum([self.enrollment, self.heartbeat, self.inventory, self.nodes_ok])


def observe(
    status: OnboardingStatus | None, nodes: int | None, cluster_nodes: int | None = None
) -> CheckState:
    """The gates as the Console judges them (``None``: no such cluster yet); ``nodes`` is how
    many node agents the cluster should have (``None``: not counted), ``cluster_nodes`` its
    node count."""
    state = CheckState(nodes=nodes, cluster_nodes=cluster_nodes)
    if status is None:
        state.registered = False
        return state
    gates = {check.key: check for check in status.checks}
    state.enrollment, state.heartbeat, state.inventory = (
        key in gates and gates[key].ok for key in GATES
    )
    state.details = {key: gates[key].detail for key in GATES if key in gates and not gates[key].ok}
    state.node_agents = status.node_agents
    return state


def describe_cluster(state: CheckState, cluster: ClusterView | None) -> CheckState:
    """The collector's name and the cluster's warnings (display only), added to ``state``."""
    if cluster is not None:
        state.collector = cluster.agents[0].name if cluster.agents else None
        state.notes = [f"{w.kind}: {w.message}" for w in cluster.warnings]
    return state


class NodeCounter:
    """Reads, on every poll, how many node agents the cluster should have: the DaemonSet
    controller's count of the nodes it schedules the node agent on (a DaemonSet installed while
    the check runs is counted as soon as its controller has)."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.api = api_client(KubeTarget(kubeconfig=kubeconfig))
        self.last: NodeAgentCoverage | None = None

    def __call__(self) -> NodeAgentCoverage:
        try:
            self.last = node_agent_coverage(self.api)
        except Exception as exc:  # the API briefly unreachable: the last count stands
            if self.last is None:
                raise
            get_run_logger().warning("cannot count the nodes (%s): keeping the last count", exc)
        return self.last


def _not_found_is_none(read: Callable[[str], T], slug: str) -> T | None:
    try:
        return read(slug)
    except ConsoleApiError as exc:
        if exc.status != 404:
            raise
        return None


@task(name="wait-for-enrollment")
def wait_for_enrollment(
    slug: str,
    deadline_seconds: float,
    poll_seconds: float,
    check_nodes: bool,
    kubeconfig: str | None = None,
) -> CheckState:
    log = get_run_logger()
    progress = create_progress_artifact(
        0.0, key=f"enrollment-check-{slug[:40]}", description=f"Enrollment check of {slug}"
    )
    assert isinstance(progress, UUID)  # sync context: the id, not a coroutine
    deadline = time.monotonic() + deadline_seconds
    last = -1
    count = NodeCounter(kubeconfig) if check_nodes else None
    with ConsoleClient(FlowSettings()) as console:
        while True:
            coverage = count() if count else None
            try:
                status = _not_found_is_none(console.onboarding, slug)
            except (httpx.TransportError, ConsoleUnavailable) as exc:
                # One lost connection is not a verdict: keep asking until the deadline.
                log.warning("the Console did not answer (%s); asking again", exc)
                if time.monotonic() > deadline:
                    raise
                time.sleep(poll_seconds)
                continue
            state = observe(
                status,
                coverage.expected if coverage else None,
                coverage.nodes if coverage else None,
            )
            if state.done() != last:
                update_progress_artifact(progress, 100 * state.done() / 4, description=_line(state))
                log.info("%s", _line(state))
                last = state.done()
            if state.done() == 4 or time.monotonic() > deadline:
                break
            time.sleep(poll_seconds)
        return describe_cluster(state, _not_found_is_none(console.cluster, slug))


def _line(s: CheckState) -> str:
    mark = {True: "ok", False: "waiting"}
    nodes = f"{s.node_agents}/{s.nodes}" if s.nodes is not None else f"{s.node_agents}"
    nodes += _uncovered(s)
    return (
        f"enrollment {mark[s.enrollment]}, heartbeat {mark[s.heartbeat]}, first inventory "
        f"{mark[s.inventory]}, node agents {nodes}"
    )


def _uncovered(s: CheckState) -> str:
    """Nodes the node-agent DaemonSet is not scheduled on, said beside the count."""
    if s.nodes is None or s.cluster_nodes is None or s.cluster_nodes == s.nodes:
        return ""
    return (
        f" (the node-agent DaemonSet is scheduled on {s.nodes} of the {s.cluster_nodes} nodes: "
        "its nodeSelector, affinity and tolerations leave the others out)"
    )


def report(slug: str, state: CheckState) -> tuple[bool, str]:
    lines = [f"# Enrollment check: {slug}", ""]
    missing = [] if state.registered else ["registered"]
    if not state.registered:
        lines.append(f"- ❌ no cluster with slug {slug!r} in the Console")
    for step in GATES:
        ok = getattr(state, step)
        detail = f" — {state.details[step]}" if step in state.details else ""
        lines.append(f"- {'✅' if ok else '❌'} {step}{detail}")
        if not ok:
            missing.append(step)
    if state.nodes is not None:
        lines.append(
            f"- {'✅' if state.nodes_ok else '❌'} node agents {state.node_agents}/{state.nodes}"
            + _uncovered(state)
        )
        if not state.nodes_ok:
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
    if state.notes:
        lines += ["", "Warnings:"] + [f"- {n}" for n in state.notes]
    return not missing, "\n".join(lines)


@flow(name="enrollment-check")
def enrollment_check(
    cluster_slug: str,
    deadline_seconds: float = 600,
    poll_seconds: float = 2,
    kubeconfig: str | None = None,
    check_nodes: bool = False,
) -> dict[str, Any]:
    """Wait for a cluster's collector to enroll, heartbeat and sync (the Console's onboarding
    gates, the same the wizard shows); with ``check_nodes``, count node agents against the
    nodes the node-agent DaemonSet is scheduled on (every node where there is none).

    Args:
        cluster_slug: The cluster's slug in the Console (clusterAgent.clusterSlug).
        deadline_seconds: How long to wait for every gate before failing the run.
        poll_seconds: How often the Console is asked.
        kubeconfig: A kubeconfig for counting nodes (with check_nodes); unset: the worker's.
        check_nodes: Also count node agents against the nodes the DaemonSet runs on.
    """
    state = wait_for_enrollment(
        cluster_slug, deadline_seconds, poll_seconds, check_nodes, kubeconfig
    )
    passed, text = report(cluster_slug, state)
    create_markdown_artifact(
        text,
        key=f"enrollment-check-{cluster_slug[:40]}-report",
        description="pass" if passed else "fail",
    )
    get_run_logger().info("%s", text)
    result = {**asdict(state), "passed": passed, "report": text}
    if not passed:
        # A failing check is a Failed run (red in the UI, non-zero for `prefect … run --watch`).
        message = f"enrollment check of {cluster_slug} failed: " + (
            "no cluster with this slug in the Console"
            if not state.registered
            else "missing "
            + ", ".join(
                [step for step in GATES if not getattr(state, step)]
                + ([] if state.nodes_ok else ["node agents"])
            )
        )
        return Failed(message=message, data=result)  # type: ignore[return-value]
    return result
