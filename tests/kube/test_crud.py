"""CRUD through the official client's typed APIs, on the real paths and JSON shapes."""

from __future__ import annotations

import json

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException

from testkit.kube import KubeApiDouble, objects, preload_fleet
from testkit.kube.fleet import FleetSpec


def _status(exc: ApiException) -> dict[str, object]:
    return json.loads(exc.body)


def test_a_pod_is_created_read_replaced_patched_and_deleted(kube_client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kube_client)
    body = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="web-1", labels={"app": "web"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="web", image="nginx:1.27")]),
    )
    created = core.create_namespaced_pod("default", body)
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.namespace == "default" and created.kind == "Pod"

    read = core.read_namespaced_pod("web-1", "default")
    assert read.spec.containers[0].image == "nginx:1.27"

    read.metadata.labels["tier"] = "front"
    replaced = core.replace_namespaced_pod("web-1", "default", read)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.uid == created.metadata.uid

    patched = core.patch_namespaced_pod(
        "web-1", "default", {"metadata": {"labels": {"tier": None}}}
    )
    assert patched.metadata.labels == {"app": "web"}

    core.delete_namespaced_pod("web-1", "default")
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("web-1", "default")
    assert missing.value.status == 404
    assert _status(missing.value)["reason"] == "NotFound"
    assert _status(missing.value)["message"] == 'pods "web-1" not found'


def test_duplicates_and_missing_namespaces_fail_like_the_api_server(
    kube_client: k8s.ApiClient,
) -> None:
    core = k8s.CoreV1Api(kube_client)
    body = {"metadata": {"name": "cfg"}, "data": {"a": "1"}}
    core.create_namespaced_config_map("default", body)
    with pytest.raises(ApiException) as twice:
        core.create_namespaced_config_map("default", body)
    assert twice.value.status == 409
    assert _status(twice.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as nowhere:
        core.create_namespaced_config_map("no-such-ns", body)
    assert nowhere.value.status == 404
    assert _status(nowhere.value)["message"] == 'namespaces "no-such-ns" not found'


def test_every_preloaded_kind_deserializes_into_the_official_models(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    fleet = preload_fleet(kube_api, FleetSpec(pods=300, nodes=6))
    core, apps, batch = (
        k8s.CoreV1Api(kube_client),
        k8s.AppsV1Api(kube_client),
        k8s.BatchV1Api(kube_client),
    )

    nodes = core.list_node().items
    assert len(nodes) == 6
    info = nodes[0].status.node_info
    assert info.machine_id and info.system_uuid and info.kubelet_version == "v1.33.1"
    assert nodes[0].metadata.labels["kubernetes.io/hostname"] == nodes[0].metadata.name
    assert {n.metadata.name for n in core.list_namespace().items} >= {"kube-system", "default"}

    pods = core.list_pod_for_all_namespaces().items
    assert len(pods) == 300
    assert all(p.metadata.owner_references for p in pods)
    assert {p.status.phase for p in pods} >= {"Running", "Succeeded"}

    counts = {
        "Deployment": len(apps.list_deployment_for_all_namespaces().items),
        "StatefulSet": len(apps.list_stateful_set_for_all_namespaces().items),
        "DaemonSet": len(apps.list_daemon_set_for_all_namespaces().items),
        "ReplicaSet": len(apps.list_replica_set_for_all_namespaces().items),
        "Service": len(core.list_service_for_all_namespaces().items),
        "Job": len(batch.list_job_for_all_namespaces().items),
        "CronJob": len(batch.list_cron_job_for_all_namespaces().items),
    }
    assert counts == {kind: fleet.counts[kind] for kind in counts}
    rollouts = k8s.CustomObjectsApi(kube_client).list_cluster_custom_object(
        "argoproj.io", "v1alpha1", "rollouts"
    )
    assert len(rollouts["items"]) == fleet.counts["Rollout"]
    assert rollouts["items"][0]["status"]["phase"] == "Healthy"


def test_a_daemonset_host_path_is_changed_by_strategic_merge_patch(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(
        objects.namespace("proxima-system"),
        objects.daemonset(
            "proxima-agent-node",
            "proxima-system",
            host_paths={"data": "/var/lib/proxima-agent", "proc": "/proc"},
        ),
    )
    apps = k8s.AppsV1Api(kube_client)
    before = apps.read_namespaced_daemon_set("proxima-agent-node", "proxima-system")

    patch = {
        "spec": {
            "template": {
                "spec": {"volumes": [{"name": "data", "hostPath": {"path": "/srv/proxima"}}]}
            }
        }
    }
    after = apps.patch_namespaced_daemon_set("proxima-agent-node", "proxima-system", patch)

    volumes = {v.name: v.host_path.path for v in after.spec.template.spec.volumes}
    assert volumes == {"data": "/srv/proxima", "proc": "/proc"}  # merged by name, not replaced
    assert after.metadata.generation == before.metadata.generation + 1
    assert after.status.desired_number_scheduled == before.status.desired_number_scheduled
    assert (
        kube_api.requests(verb="patch")[-1].content_type == "application/strategic-merge-patch+json"
    )


def test_a_daemonset_is_replaced_from_what_was_read(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(objects.daemonset("agent", "default", host_paths={"data": "/var/lib/a"}))
    apps = k8s.AppsV1Api(kube_client)
    ds = apps.read_namespaced_daemon_set("agent", "default")
    ds.spec.template.spec.volumes[0].host_path.path = "/var/lib/b"
    replaced = apps.replace_namespaced_daemon_set("agent", "default", ds)
    assert replaced.spec.template.spec.volumes[0].host_path.path == "/var/lib/b"

    ds.spec.template.spec.volumes[0].host_path.path = "/var/lib/c"  # still the old resourceVersion
    with pytest.raises(ApiException) as stale:
        apps.replace_namespaced_daemon_set("agent", "default", ds)
    assert stale.value.status == 409


def test_status_is_written_only_through_the_status_subresource(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(objects.deployment("api", "default", replicas=3))
    apps = k8s.AppsV1Api(kube_client)
    ignored = apps.patch_namespaced_deployment("api", "default", {"status": {"readyReplicas": 0}})
    assert ignored.status.ready_replicas == 3
    written = apps.patch_namespaced_deployment_status(
        "api", "default", {"status": {"readyReplicas": 1}}
    )
    assert written.status.ready_replicas == 1
    assert kube_api.get("deployments.apps", "api", "default")["status"]["readyReplicas"] == 1


def test_a_no_op_replace_keeps_the_resource_version(kube_client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kube_client)
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "same"}, "data": {"k": "v"}}
    )
    again = core.replace_namespaced_config_map("same", "default", created)
    assert again.metadata.resource_version == created.metadata.resource_version


def test_namespaces_and_cluster_scoped_paths(kube_client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": "team-a"}})
    assert core.read_namespace("team-a").status.phase == "Active"
    core.create_namespaced_service(
        "team-a",
        {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}},
    )
    core.delete_namespace("team-a")
    assert core.list_service_for_all_namespaces().items == []  # its contents went with it


def test_discovery_lists_the_served_groups(kube_client: k8s.ApiClient) -> None:
    groups = {g.name for g in k8s.ApisApi(kube_client).get_api_versions().groups}
    assert {"apps", "batch", "coordination.k8s.io", "argoproj.io"} <= groups
    core = {r.name for r in k8s.CoreV1Api(kube_client).get_api_resources().resources}
    assert {"pods", "nodes", "namespaces", "services", "pods/status"} <= core
    assert k8s.VersionApi(kube_client).get_code().git_version == "v1.33.1"
