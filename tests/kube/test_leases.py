"""Leases carry resourceVersion; a replace with a stale one answers 409 Conflict."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException

from testkit.kube import KubeApiDouble


def _lease(holder: str) -> k8s.V1Lease:
    now = datetime.now(UTC)
    return k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="leader"),
        spec=k8s.V1LeaseSpec(
            holder_identity=holder, lease_duration_seconds=2, acquire_time=now, renew_time=now
        ),
    )


def test_a_stale_replace_answers_409_conflict_like_the_api_server(
    kube_client: k8s.ApiClient,
) -> None:
    coordination = k8s.CoordinationV1Api(kube_client)
    created = coordination.create_namespaced_lease("default", _lease("a"))
    first = coordination.read_namespaced_lease("leader", "default")
    second = coordination.read_namespaced_lease("leader", "default")

    first.spec.holder_identity = "b"
    won = coordination.replace_namespaced_lease("leader", "default", first)
    assert int(won.metadata.resource_version) > int(created.metadata.resource_version)

    second.spec.holder_identity = "c"
    with pytest.raises(ApiException) as lost:
        coordination.replace_namespaced_lease("leader", "default", second)
    assert lost.value.status == 409
    status = json.loads(lost.value.body)
    assert status["kind"] == "Status" and status["reason"] == "Conflict" and status["code"] == 409
    assert status["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "leader": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert status["details"] == {"name": "leader", "group": "coordination.k8s.io", "kind": "leases"}
    assert coordination.read_namespaced_lease("leader", "default").spec.holder_identity == "b"


def test_creating_an_existing_lease_answers_409_already_exists(kube_client: k8s.ApiClient) -> None:
    coordination = k8s.CoordinationV1Api(kube_client)
    coordination.create_namespaced_lease("default", _lease("a"))
    with pytest.raises(ApiException) as exists:
        coordination.create_namespaced_lease("default", _lease("b"))
    assert exists.value.status == 409
    assert json.loads(exists.value.body)["reason"] == "AlreadyExists"


def test_of_many_concurrent_replaces_from_one_version_exactly_one_wins(
    kube_api: KubeApiDouble,
) -> None:
    """Sixteen clients (own connections) replace the same read at once: one 200, fifteen 409."""
    setup = kube_api.api_client()
    k8s.CoordinationV1Api(setup).create_namespaced_lease("default", _lease("nobody"))
    clients = [kube_api.api_client() for _ in range(16)]
    reads = [k8s.CoordinationV1Api(c).read_namespaced_lease("leader", "default") for c in clients]
    assert len({r.metadata.resource_version for r in reads}) == 1
    outcomes: list[int] = []
    barrier = threading.Barrier(len(clients))

    def contend(n: int) -> None:
        reads[n].spec.holder_identity = f"candidate-{n}"
        barrier.wait()
        try:
            k8s.CoordinationV1Api(clients[n]).replace_namespaced_lease(
                "leader", "default", reads[n]
            )
            outcomes.append(200)
        except ApiException as exc:
            outcomes.append(exc.status)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for c in [setup, *clients]:
        c.close()
    assert sorted(outcomes) == [200] + [409] * 15
    holder = kube_api.get("leases", "leader", "default")["spec"]["holderIdentity"]
    assert holder.startswith("candidate-")
