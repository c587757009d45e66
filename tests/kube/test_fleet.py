"""The generated fleet: deterministic, exactly sized, internally consistent."""

from __future__ import annotations

from testkit.kube import FleetSpec, KubeApiDouble, build_fleet, preload_fleet


def test_the_fleet_is_the_same_on_every_build() -> None:
    first_fleet, first = build_fleet(FleetSpec(pods=800, nodes=8))
    second_fleet, second = build_fleet(FleetSpec(pods=800, nodes=8))
    assert first == second
    assert first_fleet == second_fleet


def test_five_thousand_pods_preload_with_every_phase_and_kind(kube_api: KubeApiDouble) -> None:
    """How fast they preload is a figure of ``python -m bench.kube_preload``, not an assertion."""
    fleet = preload_fleet(kube_api)
    assert kube_api.count("pods") == 5000 == sum(fleet.pods_by_namespace.values())
    assert kube_api.count("nodes") == 50
    assert {"Running", "Pending", "Failed", "Succeeded"} <= set(fleet.pods_by_phase)
    assert fleet.pods_by_namespace["kube-system"] > 0
    for kind in (
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "ReplicaSet",
        "Service",
        "Job",
        "CronJob",
        "Rollout",
    ):
        assert fleet.counts[kind] > 0, kind


def test_every_owner_reference_points_at_a_preloaded_object() -> None:
    _, objects = build_fleet(FleetSpec(pods=1500, nodes=12))
    uids = {o["metadata"]["uid"] for o in objects}
    owned = [o for o in objects if o["metadata"].get("ownerReferences")]
    assert owned
    assert all(ref["uid"] in uids for o in owned for ref in o["metadata"]["ownerReferences"])
    scheduled = [o for o in objects if o["kind"] == "Pod" and o["status"]["phase"] != "Pending"]
    nodes = {o["metadata"]["name"] for o in objects if o["kind"] == "Node"}
    assert all(p["spec"]["nodeName"] in nodes for p in scheduled)


def test_nodes_carry_identity_and_labels() -> None:
    _, objects = build_fleet(FleetSpec(pods=10, nodes=4, control_plane_nodes=1))
    nodes = [o for o in objects if o["kind"] == "Node"]
    machine_ids = {n["status"]["nodeInfo"]["machineID"] for n in nodes}
    assert len(machine_ids) == 4  # distinct hosts
    assert "node-role.kubernetes.io/control-plane" in nodes[0]["metadata"]["labels"]
    assert all(n["status"]["nodeInfo"]["systemUUID"] for n in nodes)


def test_a_small_budget_is_respected_exactly() -> None:
    for pods in (0, 1, 7, 61):
        fleet, objects = build_fleet(FleetSpec(pods=pods, nodes=5))
        assert (
            sum(1 for o in objects if o["kind"] == "Pod")
            == pods
            == sum(fleet.pods_by_namespace.values())
        )
