"""The chart's RBAC and the collector's calls cannot drift: a real collection and election run
against the API double, under exactly the rules the real helm renders, makes no call they
refuse, and the calls it makes are ``agent.cluster.REQUIRED_PERMISSIONS``."""

from __future__ import annotations

import asyncio
from itertools import product
from typing import Any

from agent.cluster import (
    INVENTORY_PERMISSIONS,
    LEADER_ELECTION_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    InventoryConfig,
    InventoryReader,
    LeaseElector,
    LeaseLock,
    LeaseTiming,
)
from testkit.chart import CI_VALUES, Helm, env
from testkit.kube import FleetSpec, KubeApiDouble, objects, preload_fleet

RELEASE_NAMESPACE = "proxima-system"

# What the chart grants beyond the collector's calls: nothing (least privilege). A new
# extra fails this test until it is written here with the reason.
CHART_EXTRAS: set[tuple[str, str, str]] = set()


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group, resource, verb in product(rule["apiGroups"], rule["resources"], rule["verbs"])
    }


def _rbac(helm: Helm) -> tuple[dict[str, Any], dict[str, Any], str]:
    rendered = helm.template([CI_VALUES / "ha.yaml"])
    cluster_role = next(
        d
        for d in rendered.all("ClusterRole")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "cluster-agent"
    )
    role = next(
        d
        for d in rendered.all("Role")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "cluster-agent"
    )
    lease_name = env(rendered.statefulset)["PROXIMA_LEASE_NAME"]
    return cluster_role, role, lease_name


def test_the_chart_grants_the_collector_exactly_what_its_calls_need(
    helm: Helm, kube_api: KubeApiDouble
) -> None:
    cluster_role, role, lease_name = _rbac(helm)
    preload_fleet(kube_api, FleetSpec(pods=60, nodes=3, app_namespaces=2, rollouts=1))
    kube_api.put(objects.namespace(RELEASE_NAMESPACE))
    kube_api.enforce_rbac(cluster_role["rules"] + role["rules"])

    with kube_api.api_client() as api:
        reading = InventoryReader(api, page_size=20).read(
            InventoryConfig("c", "c", 300.0, 50, frozenset({"kube-system"}))
        )
        elector = LeaseElector(
            LeaseLock(api, lease_name, RELEASE_NAMESPACE),
            "proxima-agent-cluster-agent-0_test",
            timing=LeaseTiming(2.0, 1.5, 0.3),
        )
        assert elector.try_acquire_or_renew().ok  # create
        assert elector.try_acquire_or_renew().ok  # get + update (renew)
        asyncio.run(elector.release())  # update

    assert reading.problems == {}
    assert reading.snapshot.counts["rollouts"] == 1
    refused = [r for r in kube_api.requests() if r.status == 403]
    assert refused == [], refused
    called = {tuple(p) for p in kube_api.permissions()}
    assert called == {tuple(p) for p in REQUIRED_PERMISSIONS}

    # The ClusterRole: what the inventory lists, plus the documented read-only extras.
    granted = _grants(cluster_role["rules"])
    assert {tuple(p) for p in INVENTORY_PERMISSIONS} <= granted
    assert granted - {tuple(p) for p in INVENTORY_PERMISSIONS} == CHART_EXTRAS
    # The Role: exactly the Lease calls, get and update only on the collector's own Lease.
    assert _grants(role["rules"]) == {tuple(p) for p in LEADER_ELECTION_PERMISSIONS}
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [(sorted(r["verbs"]), r["resourceNames"]) for r in named] == [
        (["get", "update"], [lease_name])
    ]
