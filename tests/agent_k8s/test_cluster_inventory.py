"""The cluster collector as the chart runs it: a real agent process, a real Console, the
Kubernetes API double. Inventory reaches the Console chunked under NATS's max payload; forbidden
and missing Argo Rollouts; the API server going down and coming back."""

from __future__ import annotations

import time
from pathlib import Path

from contracts.vocabulary.inventory import InventoryProblemKind
from testkit.console import ConsoleProcess
from testkit.k8s import (
    MAX_PAYLOAD,
    NatsObserver,
    cluster_agent,
    cluster_inventory,
    cluster_view,
    register_cluster,
    stop_all,
)
from testkit.kube import FleetSpec, KubeApiDouble, objects, preload_fleet
from testkit.waiting import wait_for

EXCLUDED = {"kube-system", "kube-public"}


def _warnings(view: dict) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for warning in view["warnings"]:
        found.setdefault(warning["kind"], []).append(warning["message"])
    return found


def test_a_5000_pod_inventory_reaches_the_console_counted_truncated_and_without_excluded_namespaces(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kube_api: KubeApiDouble,
    kube_env: dict[str, str],
    tmp_path: Path,
) -> None:
    fleet = preload_fleet(kube_api)
    kube_api.put(objects.namespace("proxima-system"))
    slug, token = register_cluster(k8s_console, "Production RKE2")
    agent = cluster_agent(
        tmp_path,
        k8s_console,
        kube_env,
        token=token,
        cluster_name="Production RKE2",
        env={
            "PROXIMA_CLUSTER_SLUG": slug,
            "PROXIMA_POD_LIMIT": "4000",
            "PROXIMA_EXCLUDE_NAMESPACES": ",".join(sorted(EXCLUDED)),
            "PROXIMA_SYNC_INTERVAL": "5m",
        },
    ).start()
    try:
        agent_id = agent.agent_id()
        view = wait_for(
            lambda: (v := cluster_view(k8s_console, slug))["last_inventory_at"] and v,
            timeout=30,
            what="the first inventory in the Console",
        )
        pods = fleet.pods_outside(EXCLUDED)
        assert pods > 4000
        assert view["counts"]["pods"] == pods
        assert view["counts"]["nodes"] == 50
        # The fleet's namespaces and proxima-system, less the excluded ones.
        assert view["counts"]["namespaces"] == len(fleet.namespaces) + 1 - len(EXCLUDED)
        assert view["counts"]["rollouts"] == fleet.counts["Rollout"]
        assert view["truncated"] == {"pods": {"limit": 4000, "total": pods}}
        assert view["errors"] == []
        assert set(_warnings(view)) == {"inventory_truncated", "sync_interval_drift"}
        assert view["sync_interval_seconds"] == 300.0
        assert view["kubernetes_version"] == "v1.33.1"

        listed = cluster_inventory(k8s_console, slug, "pods")
        assert listed["total"] == 4000
        assert not {p["namespace"] for p in listed["items"]} & EXCLUDED
        namespaces = {
            n["name"] for n in cluster_inventory(k8s_console, slug, "namespaces")["items"]
        }
        assert "payments" in namespaces and not namespaces & EXCLUDED

        # Chunked under the server's max payload, as the Console's NATS reports it.
        chunks = observer.of("inventory", agent_id)
        assert chunks[0].data["total"] > 1
        assert len(chunks) == chunks[0].data["total"]
        assert max(c.data["bytes"] for c in chunks) <= MAX_PAYLOAD

        # Paginated list calls, every kind once, excluded namespaces filtered by the server.
        pod_lists = kube_api.requests(verb="list", resource="pods")
        assert len(pod_lists) == -(-pods // 500)
        assert all(r.query.get("limit") == "500" for r in pod_lists)
        assert all("continue" in r.query for r in pod_lists[1:])
        assert "metadata.namespace!=kube-system" in pod_lists[0].query["fieldSelector"]
        # replicas: 1 leads without contention: no Lease at all.
        assert kube_api.requests(resource="leases") == []
        wait_for(
            lambda: cluster_view(k8s_console, slug)["agents"][0]["leader"] is True,
            what="the collector reported as leader",
        )
        log = agent.log()
        assert "inventory of cluster production-rke2 published" in log
        assert "pods cut to 4000 of" in log
    finally:
        stop_all([agent])


def _running_collector(
    tmp_path: Path,
    console: ConsoleProcess,
    kube: KubeApiDouble,
    kube_env: dict[str, str],
    name: str,
    env: dict[str, str] | None = None,
):
    preload_fleet(kube, FleetSpec(pods=120, nodes=4, app_namespaces=4, rollouts=2))
    slug, token = register_cluster(console, name)
    agent = cluster_agent(
        tmp_path, console, kube_env, token=token, cluster_name=name, env=env
    ).start()
    return slug, agent


def test_forbidden_rollouts_are_logged_once_and_the_rest_of_the_inventory_flows(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kube_api: KubeApiDouble,
    kube_env: dict[str, str],
    tmp_path: Path,
) -> None:
    kube_api.set_rollouts("forbidden")
    slug, agent = _running_collector(tmp_path, k8s_console, kube_api, kube_env, "Old Chart")
    try:
        agent_id = agent.agent_id()
        wait_for(lambda: len(observer.syncs(agent_id)) >= 4, timeout=30, what="four syncs")
        view = cluster_view(k8s_console, slug)
        assert view["counts"]["pods"] == 120
        assert "rollouts" not in view["counts"]
        assert view["errors"] == [
            "forbidden to read argo rollouts: the ClusterRole has no argoproj.io rollouts rule "
            "(a chart older than Argo Rollouts support): helm upgrade to the current chart"
        ]
        assert _warnings(view)["inventory_errors"] == view["errors"]
        # The same, as a fact on the wire (no English matched across processes).
        problems = observer.snapshots(agent_id)[-1].problems
        assert problems is not None
        assert [(p.kind, p.resource, p.message) for p in problems] == [
            (InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS, "rollouts", view["errors"][0])
        ]
        log = agent.log()
        assert log.count("forbidden to read argo rollouts") == 1, log
        assert "helm upgrade to the current chart" in log
        assert "upgrading the image alone does not add the rule" in log

        # The operator upgrades the chart: rollouts flow again, said once.
        kube_api.set_rollouts("present")
        wait_for(
            lambda: cluster_view(k8s_console, slug)["counts"].get("rollouts") == 2,
            timeout=15,
            what="rollouts in the Console",
        )
        assert cluster_view(k8s_console, slug)["errors"] == []
        assert observer.snapshots(agent_id)[-1].problems == [], "an empty list: none, not unsent"
        assert agent.log().count("rollouts readable again") == 1
        assert agent.log().count("forbidden to read argo rollouts") == 1
    finally:
        stop_all([agent])


def test_a_missing_rollouts_crd_is_not_an_error(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kube_api: KubeApiDouble,
    kube_env: dict[str, str],
    tmp_path: Path,
) -> None:
    kube_api.set_rollouts("absent")
    slug, agent = _running_collector(tmp_path, k8s_console, kube_api, kube_env, "No Argo")
    try:
        agent_id = agent.agent_id()
        wait_for(lambda: len(observer.syncs(agent_id)) >= 3, timeout=30, what="three syncs")
        view = cluster_view(k8s_console, slug)
        assert view["counts"]["rollouts"] == 0
        assert view["counts"]["pods"] == 120
        assert view["errors"] == []
        assert "inventory_errors" not in _warnings(view)
        assert [r.status for r in kube_api.requests(resource="rollouts")][:1] == [404]
        log = agent.log()
        assert "argo rollouts" not in log and "cannot read rollouts" not in log
        assert " WARNING " not in log, log
    finally:
        stop_all([agent])


def test_the_api_server_down_is_logged_once_the_agent_stays_ready_and_recovers(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kube_api: KubeApiDouble,
    kube_env: dict[str, str],
    tmp_path: Path,
) -> None:
    slug, agent = _running_collector(
        tmp_path,
        k8s_console,
        kube_api,
        kube_env,
        "Flaky API",
        env={"PROXIMA_LOG_LEVEL": "debug"},
    )
    try:
        agent_id = agent.agent_id()
        wait_for(lambda: observer.syncs(agent_id), timeout=30, what="a first sync")
        kube_api.down()
        down_at = time.monotonic()
        wait_for(
            lambda: "inventory sync failed (4 in a row)" in agent.log(),
            timeout=20,
            what="four failed syncs",
        )
        log = agent.log()
        assert log.count("unavailable: connection refused") == 1, log
        assert "the agent stays connected and retries every 500ms" in log
        assert "Retrying" not in log  # urllib3's per-retry warnings are kept out
        # Still enrolled, connected and heartbeating: its identity does not need the API.
        assert agent.readyz()[0] == 200
        assert observer.of("heartbeat", agent_id, since=down_at + 1.0)
        assert not observer.syncs(agent_id, since=down_at + 1.0)

        kube_api.up()
        up_at = time.monotonic()
        wait_for(lambda: observer.syncs(agent_id, since=up_at), timeout=15, what="a sync after up")
        wait_for(lambda: len(observer.syncs(agent_id, since=up_at)) >= 3, what="three syncs")
        log = agent.log()
        assert log.count("available again: inventory flows") == 1
        assert log.count("unavailable: connection refused") == 1
        assert cluster_view(k8s_console, slug)["counts"]["pods"] == 120
    finally:
        stop_all([agent])
