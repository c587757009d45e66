"""Fault injection: 403 with a real Status, a missing CRD, 404/500, the server down and back."""

from __future__ import annotations

import json

import kubernetes.client as k8s
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from testkit.kube import (
    DEFAULT_USER,
    Fault,
    KubeApiDouble,
    RbacPolicy,
    RolloutsMode,
    ServerState,
    objects,
)
from testkit.kube.audit import Permission


def _rollouts(client: k8s.ApiClient) -> dict[str, object]:
    return k8s.CustomObjectsApi(client).list_cluster_custom_object(
        "argoproj.io", "v1alpha1", "rollouts"
    )


def test_forbidden_rollouts_raise_api_exception_403_with_the_rbac_message(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(objects.rollout("web", "default"), objects.pod("web-1", "default", node_name="n"))
    kube_api.set_rollouts(RolloutsMode.FORBIDDEN)

    with pytest.raises(ApiException) as denied:
        _rollouts(kube_client)

    assert denied.value.status == 403
    assert json.loads(denied.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'rollouts.argoproj.io is forbidden: User "system:serviceaccount:proxima-system:'
        'proxima-agent-cluster-agent" cannot list resource "rollouts" in API group "argoproj.io" '
        "at the cluster scope",
        "reason": "Forbidden",
        "details": {"group": "argoproj.io", "kind": "rollouts"},
        "code": 403,
    }
    assert (
        len(k8s.CoreV1Api(kube_client).list_pod_for_all_namespaces().items) == 1
    )  # the rest works
    groups = {g.name for g in k8s.ApisApi(kube_client).get_api_versions().groups}
    assert "argoproj.io" in groups  # RBAC does not hide discovery

    kube_api.set_rollouts(RolloutsMode.PRESENT)
    assert len(_rollouts(kube_client)["items"]) == 1


def test_a_namespaced_forbidden_call_names_the_namespace(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.forbid("leases", group="coordination.k8s.io", verbs=["get"])
    with pytest.raises(ApiException) as denied:
        k8s.CoordinationV1Api(kube_client).read_namespaced_lease("leader", "proxima-system")
    assert json.loads(denied.value.body)["message"] == (
        f'leases.coordination.k8s.io "leader" is forbidden: User "{DEFAULT_USER}" cannot get '
        'resource "leases" in API group "coordination.k8s.io" in the namespace "proxima-system"'
    )


def test_absent_rollouts_look_like_a_missing_crd(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.set_rollouts("absent")
    with pytest.raises(ApiException) as missing:
        _rollouts(kube_client)
    assert missing.value.status == 404
    assert (
        json.loads(missing.value.body)["message"]
        == "the server could not find the requested resource"
    )
    assert "argoproj.io" not in {g.name for g in k8s.ApisApi(kube_client).get_api_versions().groups}
    with pytest.raises(ApiException) as no_group:
        k8s.CustomObjectsApi(kube_client).get_api_resources("argoproj.io", "v1alpha1")
    assert no_group.value.status == 404


def test_faults_fire_for_matching_calls_and_a_limited_number_of_times(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(kube_client)
    blip = kube_api.fail("pods", code=500, verbs="list", times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as broken:
            core.list_pod_for_all_namespaces()
        assert broken.value.status == 500
        assert json.loads(broken.value.body)["reason"] == "InternalError"
    assert core.list_pod_for_all_namespaces().items == []
    assert blip.hits == 2 and blip.exhausted
    core.list_node()  # other resources were never affected

    gone = kube_api.fail("nodes", code=404, name="node-7")
    with pytest.raises(ApiException) as missing:
        core.read_node("node-7")
    assert json.loads(missing.value.body)["message"] == 'nodes "node-7" not found'
    gone.remove()
    kube_api.put(objects.node("node-7"))
    assert core.read_node("node-7").metadata.name == "node-7"

    kube_api.inject(Fault(503, resource="nodes", times=1))
    with pytest.raises(ApiException) as busy:
        core.list_node()
    assert busy.value.status == 503


def test_a_503_with_retry_after_is_retried_by_the_client_itself(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    """urllib3 under the official client honours Retry-After on 429/503; the caller never knows."""
    busy = kube_api.inject(Fault(503, resource="nodes", retry_after_seconds=0, times=1))
    assert k8s.CoreV1Api(kube_client).list_node().items == []
    assert busy.hits == 1
    assert [r.status for r in kube_api.requests(resource="nodes")] == [503, 200]


def test_the_server_goes_down_and_comes_back_on_the_same_port(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": "survivor"}})
    port = kube_api.port

    kube_api.down()
    assert kube_api.state is ServerState.DOWN
    with pytest.raises(urllib3.exceptions.MaxRetryError) as refused:
        core.list_namespace(_request_timeout=2)
    assert isinstance(refused.value.reason, urllib3.exceptions.NewConnectionError)

    kube_api.up()
    assert kube_api.port == port
    assert "survivor" in {n.metadata.name for n in core.list_namespace().items}


def test_an_unknown_token_is_unauthorized(kube_api: KubeApiDouble) -> None:
    with kube_api.api_client(token="wrong") as client:
        with pytest.raises(ApiException) as rejected:
            k8s.CoreV1Api(client).list_namespace()
    assert rejected.value.status == 401


def test_rbac_rules_allow_exactly_what_they_grant(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.enforce_rbac(
        [
            {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "update"],
                "resourceNames": ["leader"],
            },
        ]
    )
    core = k8s.CoreV1Api(kube_client)
    core.list_pod_for_all_namespaces()
    core.list_node()
    with pytest.raises(ApiException) as denied:
        core.list_service_for_all_namespaces()
    assert denied.value.status == 403
    with pytest.raises(ApiException) as other_lease:
        k8s.CoordinationV1Api(kube_client).read_namespaced_lease("someone-else", "default")
    assert other_lease.value.status == 403
    k8s.ApisApi(kube_client).get_api_versions()  # discovery stays open


def test_the_request_log_folds_into_the_permissions_a_cluster_role_needs(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(objects.deployment("api", "default"))
    core, apps = k8s.CoreV1Api(kube_client), k8s.AppsV1Api(kube_client)
    core.list_pod_for_all_namespaces(limit=100)
    core.list_namespace()
    apps.patch_namespaced_deployment_status("api", "default", {"status": {"readyReplicas": 0}})
    k8s.CoordinationV1Api(kube_client).create_namespaced_lease(
        "default", {"metadata": {"name": "x"}}
    )
    kube_api.set_rollouts("forbidden")
    with pytest.raises(ApiException):
        _rollouts(kube_client)

    assert kube_api.permissions() == {
        Permission("", "pods", "list"),
        Permission("", "namespaces", "list"),
        Permission("apps", "deployments/status", "patch"),
        Permission("coordination.k8s.io", "leases", "create"),
        Permission("argoproj.io", "rollouts", "list"),
    }
    first = kube_api.requests()[0]
    assert (first.method, first.path, first.query) == ("GET", "/api/v1/pods", {"limit": "100"})
    assert first.user == DEFAULT_USER


def test_observed_calls_can_be_checked_against_cluster_role_rules(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(kube_client)
    core.list_node()
    core.list_pod_for_all_namespaces()
    k8s.CoordinationV1Api(kube_client).create_namespaced_lease(
        "default", {"metadata": {"name": "x"}}
    )
    role = RbacPolicy.from_rules(
        [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "update"],
            },
        ]
    )
    missing = {p for p in kube_api.permissions() if not role.grants(*p)}
    assert missing == {Permission("coordination.k8s.io", "leases", "create")}


def test_the_double_binds_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        KubeApiDouble(host="0.0.0.0")
