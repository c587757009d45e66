"""``hostdatadir-migration``: move the node agent's ``hostDataDir`` on a live cluster.

The chart page's "Changing hostDataDir on a live cluster is not always safe", automated. Dry-run by
default. See ``docs/hostdatadir-migration.md``. This module holds the flow and its tasks (each
one I/O step); what they decide lives in the pure :mod:`flows.hostdatadir` modules.

1. **Plan** (pure, :func:`rollout_policy.plan_hostdatadir_migration`): every node the DaemonSet
   runs on, the Console records under its name, whether a host agent runs there and whether the
   DaemonSet's pods can read the host identity (read from the live DaemonSet's mounts:
   :mod:`flows.hostdatadir.manifests`). Each node is classed (host agent present / re-bind
   possible / needs release, with the reason / fresh); the plan is a table artifact. A dry run
   stops here.
2. **Apply**: ``helm upgrade --install … --reuse-values --set nodeAgent.hostDataDir=<new>``
   (:mod:`flows.helm`: the real binary, or render-apply where helm cannot install); then one task
   waits for every node's pod to come back on the new directory, releases the old record of each
   node that cannot re-bind once it has been quiet past the window, and confirms the pod
   re-binds to the same record id (:mod:`flows.hostdatadir.progress`). A progress artifact moves
   as nodes finish.
3. **Verify** (:mod:`flows.hostdatadir.verification`): every node has exactly one live
   ``k8s-node-monitor`` record, kept its record id, is not stuck in 409; no node shares an
   identity with a host agent (the chart page's hostPath check on the live DaemonSet). A pass/fail
   report artifact; the flow run fails when a check fails.
"""

from __future__ import annotations

import posixpath
import time
from logging import Logger, LoggerAdapter
from typing import Any, Literal
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from contracts.views import AgentFilter, AgentView
from contracts.vocabulary import AgentType, ReleaseOutcome
from flows.console_client import ConsoleApiError, ConsoleClient
from flows.helm import HelmCli, HelmRelease, HelmUpgrader, RenderApply, UpgradeResult
from flows.hostdatadir.errors import MigrationFailedError, check_apply
from flows.hostdatadir.manifests import ClusterFacts, cluster_facts
from flows.hostdatadir.progress import NodeProgress, Verdict, release_refused
from flows.hostdatadir.records import by_name, migration_nodes
from flows.hostdatadir.reports import plan_description, report
from flows.hostdatadir.verification import failed_checks, verify_migration
from flows.kube import KubeTarget, api_client
from flows.settings import FlowSettings
from rollout_policy import MigrationPlan, MigrationRow, plan_hostdatadir_migration

__all__ = ["hostdatadir_migration"]

PARAMETER = "nodeAgent.hostDataDir"

RunLogger = Logger | LoggerAdapter[Logger]


# --- tasks: one I/O step each ---------------------------------------------------------------


@task(name="read-cluster", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def read_cluster(
    target: KubeTarget, namespace: str, release: str, daemonset: str | None
) -> ClusterFacts:
    from kubernetes import client

    api = api_client(target)
    apps: Any = client.AppsV1Api(api)
    if daemonset:
        found = [apps.read_namespaced_daemon_set(daemonset, namespace)]
    else:
        selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=node-agent"
        found = apps.list_namespaced_daemon_set(namespace, label_selector=selector).items
        if len(found) != 1:
            names = [d.metadata.name for d in found]
            raise LookupError(
                f"expected one node-agent DaemonSet of release {release!r} in {namespace}, "
                f"found {names or 'none'}: pass daemonset="
            )
    core: Any = client.CoreV1Api(api)
    return cluster_facts(
        api.sanitize_for_serialization(found[0]),
        [api.sanitize_for_serialization(n) for n in core.list_node().items],
    )


@task(name="read-console-records", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def read_records() -> list[AgentView]:
    """The host and node-monitor records of the token's environment."""
    with ConsoleClient(FlowSettings()) as console:
        return [
            *console.agents(AgentFilter(agent_type=AgentType.HOST)),
            *console.agents(AgentFilter(agent_type=AgentType.K8S_NODE_MONITOR)),
        ]


@task(name="read-quiet-window", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def read_quiet_window() -> float:
    """The Console's quiet window (``PROXIMA_IDENTITY_QUIET_SECONDS``), read, never copied."""
    with ConsoleClient(FlowSettings()) as console:
        return console.settings().quiet_window_seconds


@task(name="helm-upgrade", cache_policy=NO_CACHE)
def helm_upgrade(
    mode: str,
    release: HelmRelease,
    new_dir: str,
    helm_binary: str,
    values_files: list[str],
    target: KubeTarget,
) -> UpgradeResult:
    upgrader: HelmUpgrader
    if mode == "render-apply":
        upgrader = RenderApply(
            api=api_client(target), values_files=tuple(values_files), binary=helm_binary
        )
    else:
        upgrader = HelmCli(binary=helm_binary)
    result = upgrader.upgrade(release, {PARAMETER: new_dir})
    get_run_logger().info(
        "%s: %s%s",
        result.mode,
        " ".join(result.command[1:]),
        f" → {', '.join(result.applied)}" if result.applied else "",
    )
    return result


@task(name="wait-for-nodes", cache_policy=NO_CACHE)
def wait_for_nodes(
    rows: list[MigrationRow],
    before: dict[str, AgentView],
    window: float,
    timeout_seconds: float,
    poll_seconds: float,
    require_new_instance: bool,
) -> list[dict[str, str]]:
    """One loop for every node (never a task per node): read the node-monitor records, judge
    each node, release the records that need it, move the progress artifact as nodes finish.
    Gives up on the nodes still waiting once ``timeout_seconds`` pass with no node finishing."""
    log = get_run_logger()
    artifact = create_progress_artifact(
        0.0, key="hostdatadir-migration-progress", description="waiting for the nodes"
    )
    assert isinstance(artifact, UUID)  # sync context: the id, not a coroutine
    progress = NodeProgress(
        rows={str(row.node): row for row in rows},
        before=before,
        window=window,
        require_new_instance=require_new_instance,
        started=time.monotonic(),
    )
    with ConsoleClient(FlowSettings()) as console:
        while True:
            if _poll_nodes(console, progress, log):
                update_progress_artifact(artifact, progress.percent(), description=progress.text())
            if progress.complete:
                break
            if progress.stalled(time.monotonic(), timeout_seconds):
                percent = progress.percent()
                progress.time_out(timeout_seconds)
                update_progress_artifact(artifact, percent, description=progress.text())
                break
            time.sleep(poll_seconds)
    return progress.outcomes()


def _poll_nodes(console: ConsoleClient, progress: NodeProgress, log: RunLogger) -> bool:
    """One pass over the nodes still waiting; whether any node is new or changed state."""
    monitor = AgentType.K8S_NODE_MONITOR
    records = by_name(console.agents(AgentFilter(agent_type=monitor)), monitor)
    changed = False
    for node in progress.pending():
        verdict = progress.judge(node, records.get(node))
        if verdict.release is not None:
            verdict = _release(console, progress, node, verdict)
        if progress.states.get(node) != verdict:
            log.info("%s: %s", node, verdict.detail)
            changed = progress.observe(node, verdict, time.monotonic()) or changed
    return changed


def _release(
    console: ConsoleClient, progress: NodeProgress, node: str, verdict: Verdict
) -> Verdict:
    assert verdict.release is not None
    try:
        answer = console.release_identity(verdict.release)
    except ConsoleApiError as exc:
        return release_refused(verdict, exc.reason, exc.message)
    if answer.outcome is ReleaseOutcome.REFUSED:
        return release_refused(verdict, answer.reason or "refused", answer.message)
    return progress.mark_released(node, verdict)


# --- the flow: it only sequences ------------------------------------------------------------


@flow(name="hostdatadir-migration")
def hostdatadir_migration(
    new_host_data_dir: str = "/var/lib/proxima-node-agent",
    dry_run: bool = True,
    release: str = "proxima-agent",
    chart: str = "proxima/proxima-agent",
    namespace: str = "proxima-system",
    daemonset: str | None = None,
    helm_mode: Literal["helm", "render-apply"] = "helm",
    helm_binary: str = "helm",
    values_files: list[str] | None = None,
    kubeconfig: str | None = None,
    kube_context: str | None = None,
    quiet_window_seconds: float | None = None,
    timeout_seconds: float = 900,
    poll_seconds: float = 5,
) -> dict[str, Any]:
    """Move the node agent's hostDataDir (dry-run by default: the plan only).

    ``helm_mode``: ``helm`` runs ``helm upgrade --install … --reuse-values --set
    nodeAgent.hostDataDir=…``; ``render-apply`` renders it with ``helm template`` from
    ``values_files`` (the release's values) and writes the DaemonSet through the Kubernetes API.
    ``quiet_window_seconds``: by default the Console's own (``GET /api/v1/settings``, its
    PROXIMA_IDENTITY_QUIET_SECONDS); a shorter one only makes releases retry, since the Console
    decides every release itself. ``timeout_seconds``: give up on the nodes still waiting once
    no node has finished for this long.

    Args:
        new_host_data_dir: The node agent's new host data directory (nodeAgent.hostDataDir).
        dry_run: True: the plan only; false: apply it.
        release: The Helm release of the chart.
        chart: The chart reference helm upgrades to (a repository name or a directory).
        namespace: The release's namespace.
        daemonset: The node-agent DaemonSet's name; unset: found by the release's labels.
        helm_mode: helm (helm upgrade --reuse-values) or render-apply (helm template, then
            the Kubernetes API).
        helm_binary: The helm program to run.
        values_files: The release's values files (render-apply only).
        kubeconfig: A kubeconfig file; unset: the worker's KUBECONFIG or in-cluster.
        kube_context: A context of that kubeconfig.
        quiet_window_seconds: Unset: the Console's own quiet window.
        timeout_seconds: Give up on nodes still waiting once none has finished this long.
        poll_seconds: How often nodes and records are read while waiting.
    """
    new_dir = posixpath.normpath(new_host_data_dir)
    if not new_dir.startswith("/"):
        raise ValueError(f"new_host_data_dir must be an absolute path, got {new_host_data_dir!r}")
    target = KubeTarget(kubeconfig=kubeconfig, context=kube_context)
    cluster = read_cluster(target, namespace, release, daemonset)
    before = read_records()
    window = read_quiet_window() if quiet_window_seconds is None else quiet_window_seconds
    plan = plan_hostdatadir_migration(migration_nodes(cluster, before), quiet_window_seconds=window)
    result = _publish_plan(cluster, new_dir, plan, dry_run)
    if dry_run:
        return result

    check_apply(plan, data_path=cluster.data_path, new_dir=new_dir)
    moving = cluster.data_path != new_dir
    if moving:
        helm = HelmRelease(release, chart, namespace, kubeconfig, kube_context)
        upgrade = helm_upgrade(helm_mode, helm, new_dir, helm_binary, values_files or [], target)
        result["upgrade"] = {"mode": upgrade.mode, "applied": list(upgrade.applied)}
    outcomes = wait_for_nodes(
        list(plan.rows),
        by_name(before, AgentType.K8S_NODE_MONITOR),
        window,
        timeout_seconds,
        poll_seconds,
        moving,
    )
    create_table_artifact(
        outcomes, key="hostdatadir-migration-nodes", description=f"Nodes after moving to {new_dir}"
    )
    result["outcomes"] = outcomes
    after_cluster = read_cluster(target, namespace, release, daemonset)
    checks = verify_migration(
        plan, before, read_records(), after_cluster.data_path, new_dir, after_cluster.daemonset
    )
    return _publish_verdict(result, plan, new_dir, outcomes, checks)


def _publish_plan(
    cluster: ClusterFacts, new_dir: str, plan: MigrationPlan, dry_run: bool
) -> dict[str, Any]:
    """The plan as a table artifact and in the log; the start of the flow's result."""
    log = get_run_logger()
    description = plan_description(cluster, new_dir, plan, dry_run)
    create_table_artifact(plan.table(), key="hostdatadir-migration-plan", description=description)
    log.info("%s", description)
    for row in plan.rows:
        log.info("%s: %s — %s", row.node, row.node_class.value, row.action)
    return {
        "dry_run": dry_run,
        "daemonset": cluster.daemonset,
        "from": cluster.data_path,
        "to": new_dir,
        "plan": plan.table(),
        "classes": {str(row.node): row.node_class.value for row in plan.rows},
        "skipped_nodes": list(cluster.skipped),
    }


def _publish_verdict(
    result: dict[str, Any],
    plan: MigrationPlan,
    new_dir: str,
    outcomes: list[dict[str, str]],
    checks: list[dict[str, str]],
) -> dict[str, Any]:
    """The pass/fail report artifact; the flow run fails when a check failed."""
    failed = failed_checks(checks)
    result["checks"] = checks
    result["passed"] = not failed
    create_markdown_artifact(
        report(new_dir, outcomes, checks),
        key="hostdatadir-migration-verify",
        description="pass" if not failed else "fail",
    )
    if failed:
        raise MigrationFailedError(failed)
    get_run_logger().info(
        "hostDataDir migration to %s verified on %d nodes", new_dir, len(plan.rows)
    )
    return result
