"""``enrollment-check``: what the onboarding wizard verifies, as a flow.

For a cluster slug, wait — with a deadline and a live progress artifact — for the cluster
agent's enrollment, its first heartbeat and the first inventory sync, as the Console judges them
(``GET /api/v1/clusters/{slug}/onboarding``: the gates the web wizard shows, one
implementation); count the node agents that enrolled against the nodes that exist (read from
Kubernetes). End with a pass/fail report naming what is missing and the likely cause from the
seed's Common Issues table.
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
from flows.kube import KubeTarget, api_client, node_names
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
    them), and the node count, the one thing only the cluster knows."""

    registered: bool = True
    """False: the Console has no cluster with this slug (its onboarding answered 404)."""
    enrollment: bool = False
    heartbeat: bool = False
    inventory: bool = False
    node_agents: int = 0
    nodes: int | None = None
    collector: str | None = None
    notes: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    """The Console's detail of each pending gate."""

    @property
    def nodes_ok(self) -> bool:
        return self.nodes is None or self.node_agents >= self.nodes

    def done(self) -> int:
        return sum([self.enrollment, self.heartbeat, self.inventory, self.nodes_ok])


def observe(status: OnboardingStatus | None, nodes: int | None) -> CheckState:
    """The gates as the Console judges them (``None``: no such cluster yet); ``nodes`` is the
    cluster's node count (``None``: not counted)."""
    state = CheckState(nodes=nodes)
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


@task(name="count-nodes", retries=2, retry_delay_seconds=2)
def count_nodes(kubeconfig: str | None) -> int:
    return len(node_names(api_client(KubeTarget(kubeconfig=kubeconfig))))


def _not_found_is_none(read: Callable[[str], T], slug: str) -> T | None:
    try:
        return read(slug)
    except ConsoleApiError as exc:
        if exc.status != 404:
            raise
        return None


@task(name="wait-for-enrollment")
def wait_for_enrollment(
    slug: str, deadline_seconds: float, poll_seconds: float, nodes: int | None
) -> CheckState:
    log = get_run_logger()
    progress = create_progress_artifact(
        0.0, key=f"enrollment-check-{slug[:40]}", description=f"Enrollment check of {slug}"
    )
    assert isinstance(progress, UUID)  # sync context: the id, not a coroutine
    deadline = time.monotonic() + deadline_seconds
    last = -1
    with ConsoleClient(FlowSettings()) as console:
        while True:
            try:
                state = observe(_not_found_is_none(console.onboarding, slug), nodes)
            except (httpx.TransportError, ConsoleUnavailable) as exc:
                # One lost connection is not a verdict: keep asking until the deadline.
                log.warning("the Console did not answer (%s); asking again", exc)
                if time.monotonic() > deadline:
                    raise
                time.sleep(poll_seconds)
                continue
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
    return (
        f"enrollment {mark[s.enrollment]}, heartbeat {mark[s.heartbeat]}, first inventory "
        f"{mark[s.inventory]}, node agents {nodes}"
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
    gates, the same the wizard shows); count node agents against the cluster's nodes."""
    nodes = count_nodes(kubeconfig) if check_nodes else None
    state = wait_for_enrollment(cluster_slug, deadline_seconds, poll_seconds, nodes)
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
