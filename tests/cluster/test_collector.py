"""The cluster collector as a local process, authenticated with a
token minted (TokenRequest) for the chart's ServiceAccount, against the real RBAC authorizer and
the real Lease API; a real Console receives what it publishes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from agent.cluster import STANDING_BY
from testkit.agents import AgentProcess
from testkit.chart import RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.console import ConsoleProcess
from testkit.k8s import (
    LEASE_DURATION,
    RETRY_PERIOD,
    NatsObserver,
    cluster_agent,
    cluster_view,
    register_cluster,
    stop_all,
)
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

SERVICE_ACCOUNT = f"{RELEASE}-cluster-agent"
LEASE = f"{RELEASE}-cluster-agent"
APP = "shop"
FORBIDDEN_ROLLOUTS = "forbidden to read argo rollouts"
ROLLOUTS_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "rollouts.argoproj.io"},
    "spec": {
        "group": "argoproj.io",
        "names": {"kind": "Rollout", "plural": "rollouts", "singular": "rollout"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def service_account_env(cli: ClusterCli, namespace: str, tmp_path: Path) -> dict[str, str]:
    """What the collector process needs: a kubeconfig with the chart ServiceAccount's token."""
    return cli.service_account_env(namespace, SERVICE_ACCOUNT, tmp_path / "collector.kubeconfig")


def app_workloads(cli: ClusterCli) -> None:
    """One object of each kind the collector reads, in an application namespace."""
    cli.kubectl("create", "namespace", APP, check=False)
    cli.kubectl("-n", APP, "create", "deployment", "web", "--image=nginx", "--replicas=2")
    cli.kubectl("-n", APP, "expose", "deployment", "web", "--port=80")
    cli.kubectl("-n", APP, "create", "job", "once", "--image=busybox")
    cli.kubectl(
        "-n", APP, "create", "cronjob", "nightly", "--image=busybox", "--schedule=0 3 * * *"
    )
    wait_for(
        lambda: cli.get("deployment", "web", "-n", APP)["status"].get("readyReplicas") == 2,
        timeout=60,
        what="the shop Deployment ready",
    )


def real_counts(cli: ClusterCli) -> dict[str, int]:
    kinds = {
        "nodes": "nodes",
        "namespaces": "namespaces",
        "pods": "pods",
        "services": "services",
        "deployments": "deployments.apps",
        "statefulsets": "statefulsets.apps",
        "daemonsets": "daemonsets.apps",
        "jobs": "jobs.batch",
        "cronjobs": "cronjobs.batch",
    }
    return {key: len(cli.items(kind, "-A")) for key, kind in kinds.items()}


@pytest.fixture
def installed(cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str) -> str:
    cluster_cli.install(namespace, "-f", str(ci_values["quick-start"]))
    return namespace


def collector_env(namespace: str, slug: str, **extra: str) -> dict[str, str]:
    return {"PROXIMA_POD_NAMESPACE": namespace, "PROXIMA_CLUSTER_SLUG": slug, **extra}


def test_the_collector_with_the_charts_token_inventories_every_kind(
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    installed: str,
    tmp_path: Path,
) -> None:
    app_workloads(cluster_cli)
    env = service_account_env(cluster_cli, installed, tmp_path)
    slug, token = register_cluster(k8s_console, "Real Cluster")
    agent = cluster_agent(
        tmp_path, k8s_console, env, token=token, cluster_name="Real Cluster",
        env=collector_env(installed, slug, PROXIMA_SYNC_INTERVAL="1s"),
    ).start()  # fmt: skip
    try:
        agent_id = agent.agent_id()
        wait_for(lambda: len(observer.syncs(agent_id)) >= 2, timeout=60, what="two syncs")
        view = cluster_view(k8s_console, slug)
        expected = real_counts(cluster_cli)
        assert {k: view["counts"].get(k) for k in expected} == expected
        assert view["counts"]["rollouts"] == 0  # the CRD is not installed: not an error
        assert view["errors"] == []
        assert view["kubernetes_version"].startswith("v1.37.")
        # A refused call logs "forbidden" (and a 403 status); a bare "403" would also match a
        # port number such as 127.0.0.1:45403.
        assert "forbidden" not in agent.log().lower()
        assert not re.search(r"\b403\b", agent.log())

        # Argo Rollouts installed, and a ClusterRole from before the chart read them.
        cluster_cli.apply(ROLLOUTS_CRD)
        wait_for(
            lambda: cluster_cli.kubectl("get", "rollouts.argoproj.io", "-A", check=False)
            .returncode == 0,
            timeout=30,
            what="the Rollout CRD served",
        )  # fmt: skip
        role = cluster_cli.get("clusterrole", SERVICE_ACCOUNT)
        old_rules = [r for r in role["rules"] if "argoproj.io" not in r["apiGroups"]]
        patch = json.dumps([{"op": "replace", "path": "/rules", "value": old_rules}])
        cluster_cli.kubectl("patch", "clusterrole", SERVICE_ACCOUNT, "--type=json", "-p", patch)
        since = time.monotonic()
        wait_for(lambda: FORBIDDEN_ROLLOUTS in agent.log(), timeout=30, what="the forbidden line")
        wait_for(lambda: len(observer.syncs(agent_id, since=since)) >= 4, what="four syncs")
        view = cluster_view(k8s_console, slug)
        assert "rollouts" not in view["counts"]
        assert view["counts"]["pods"] == real_counts(cluster_cli)["pods"]
        assert [e for e in view["errors"] if FORBIDDEN_ROLLOUTS in e]
        assert agent.log().count(FORBIDDEN_ROLLOUTS) == 1
    finally:
        stop_all([agent])
        cluster_cli.kubectl("delete", "crd", "rollouts.argoproj.io", "--ignore-not-found")
        cluster_cli.kubectl("delete", "namespace", APP, "--wait=false", "--ignore-not-found")


def _console_leaders(console: ConsoleProcess, slug: str, ids: set[str]) -> list[str] | None:
    agents = [a for a in cluster_view(console, slug)["agents"] if a["id"] in ids]
    if len(agents) != len(ids) or any(a["leader"] is None for a in agents):
        return None
    return [a["id"] for a in agents if a["leader"]]


def test_three_collectors_elect_one_leader_on_the_real_lease_api(
    cluster_cli: ClusterCli,
    kube_cluster: KubeCluster,
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    installed: str,
    tmp_path: Path,
) -> None:
    env = service_account_env(cluster_cli, installed, tmp_path)
    slug, token = register_cluster(k8s_console, "Real HA")
    started = time.monotonic()
    agents: list[AgentProcess] = [
        cluster_agent(
            tmp_path,
            k8s_console,
            env,
            token=token,
            cluster_name="Real HA",
            ordinal=i,
            replicas=3,
            env=collector_env(installed, slug),
        ).start()
        for i in range(3)
    ]
    try:
        by_id = {agent.agent_id(): agent for agent in agents}
        ids = set(by_id)

        def publishers() -> list[str]:
            return [p for p in observer.publishers(since=started) if p in ids]

        wait_for(publishers, timeout=60, what="a first inventory")
        leader_id = publishers()[0]
        for standby in (a for i, a in by_id.items() if i != leader_id):
            wait_for(lambda s=standby: STANDING_BY in s.log(), what=f"{standby.name} standing by")
        wait_for(lambda: len(observer.syncs(leader_id, since=started)) >= 6, what="six syncs")
        assert publishers() == [leader_id], "exactly one publisher"
        lease = cluster_cli.get("lease", LEASE, "-n", installed)
        # The holder is the pod name and a per-process suffix (a restarted pod is a new holder).
        assert lease["spec"]["holderIdentity"].startswith(f"{by_id[leader_id].name}_")
        assert lease["spec"]["leaseDurationSeconds"] == int(LEASE_DURATION)

        by_id[leader_id].kill()
        killed = time.monotonic()
        first = wait_for(
            lambda: [s for s in observer.syncs(since=killed) if s.agent_id in ids],
            timeout=30,
            what="a standby's first inventory",
        )[0]
        new_leader = first.agent_id
        print(f"real Lease API: a standby published {first.at - killed:.2f} s after the kill")
        assert first.at - killed <= LEASE_DURATION + 2 * RETRY_PERIOD + 1.5
        wait_for(lambda: len(observer.syncs(new_leader, since=killed)) >= 4, what="four syncs")
        assert publishers() == [leader_id, new_leader], "one publisher at any time"
        assert wait_for(
            lambda: _console_leaders(k8s_console, slug, ids - {leader_id}), what="heartbeats"
        ) == [new_leader]
    finally:
        stop_all(agents)
