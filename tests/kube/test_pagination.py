"""Paging 5,000 pods with limit/continue, label and field selectors, as the official client asks."""

from __future__ import annotations

import json

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException

from testkit.kube import KubeApiDouble, objects, preload_fleet
from testkit.kube.fleet import FleetSpec


def _pages(list_call, **kwargs):  # type: ignore[no-untyped-def]
    token = None
    while True:
        page = list_call(limit=500, _continue=token, **kwargs)
        yield page
        token = page.metadata.var_continue
        if not token:
            return


def test_five_thousand_pods_page_by_500_with_continue_tokens(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    fleet = preload_fleet(kube_api)
    core = k8s.CoreV1Api(kube_client)

    pages = list(_pages(core.list_pod_for_all_namespaces))

    assert [len(p.items) for p in pages] == [500] * 10
    names = [(p.metadata.namespace, p.metadata.name) for page in pages for p in page.items]
    assert len(set(names)) == 5000 == fleet.spec.pods
    assert names == sorted(names)  # etcd key order
    assert [p.metadata.remaining_item_count for p in pages] == [
        4500 - 500 * n for n in range(9)
    ] + [None]
    assert len({p.metadata.resource_version for p in pages}) == 1  # one snapshot
    assert [r.query.get("limit") for r in kube_api.requests(verb="list")] == ["500"] * 10


def _pages_raw(core: k8s.CoreV1Api, **kwargs):  # type: ignore[no-untyped-def]
    token = None
    while True:
        r = core.list_pod_for_all_namespaces(
            limit=500, _continue=token, _preload_content=False, **kwargs
        )
        body = json.loads(r.data)
        yield body
        token = body["metadata"].get("continue")
        if not token:
            return


def test_typed_pages_carry_continue_and_remaining_count(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    preload_fleet(kube_api, FleetSpec(pods=1200, nodes=10))
    core = k8s.CoreV1Api(kube_client)
    first = core.list_namespaced_pod("kube-system", limit=7)
    assert (
        len(first.items) == 7
        and first.metadata.var_continue
        and first.metadata.remaining_item_count > 0
    )
    rest = core.list_namespaced_pod(
        "kube-system", limit=1000, _continue=first.metadata.var_continue
    )
    assert rest.metadata.var_continue is None
    everything = core.list_namespaced_pod("kube-system")
    assert [p.metadata.name for p in first.items + rest.items] == [
        p.metadata.name for p in everything.items
    ]


def test_a_bad_or_compacted_continue_token_is_refused(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    preload_fleet(kube_api, FleetSpec(pods=50, nodes=3))
    core = k8s.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as bad:
        core.list_pod_for_all_namespaces(limit=10, _continue="not-a-token")
    assert bad.value.status == 400
    token = core.list_pod_for_all_namespaces(limit=10).metadata.var_continue
    kube_api.store.compact()
    with pytest.raises(ApiException) as expired:
        core.list_pod_for_all_namespaces(limit=10, _continue=token)
    assert expired.value.status == 410
    assert json.loads(expired.value.body)["reason"] == "Expired"


@pytest.fixture
def labelled(kube_api: KubeApiDouble) -> KubeApiDouble:
    specs = {
        "a": {"app": "web", "tier": "front", "env": "prod"},
        "b": {"app": "web", "tier": "back"},
        "c": {"app": "db", "env": "staging"},
        "d": {},
    }
    kube_api.put(
        *(
            objects.pod(name, "default", node_name="node-000", labels=labels)
            for name, labels in specs.items()
        )
    )
    kube_api.put(objects.pod("e", "kube-system", node_name="node-001", labels={"app": "web"}))
    return kube_api


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", {"a", "b", "e"}),
        ("app==web,tier=front", {"a"}),
        ("app!=web", {"c", "d"}),
        ("env in (prod,staging)", {"a", "c"}),
        ("env notin (prod)", {"b", "c", "d", "e"}),
        ("tier", {"a", "b"}),
        ("!tier", {"c", "d", "e"}),
        ("app=web,!env", {"b", "e"}),
    ],
)
def test_label_selectors(
    labelled: KubeApiDouble, kube_client: k8s.ApiClient, selector: str, expected: set[str]
) -> None:
    pods = k8s.CoreV1Api(kube_client).list_pod_for_all_namespaces(label_selector=selector).items
    assert {p.metadata.name for p in pods} == expected


def test_field_selectors_on_pods(labelled: KubeApiDouble, kube_client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kube_client)
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-001").items
    assert [p.metadata.name for p in on_node] == ["e"]
    outside = core.list_pod_for_all_namespaces(
        field_selector="metadata.namespace!=kube-system"
    ).items
    assert {p.metadata.name for p in outside} == {"a", "b", "c", "d"}
    with pytest.raises(ApiException) as unsupported:
        core.list_pod_for_all_namespaces(field_selector="spec.containers=x")
    assert unsupported.value.status == 400


def test_selectors_and_paging_combine(kube_api: KubeApiDouble, kube_client: k8s.ApiClient) -> None:
    fleet = preload_fleet(kube_api, FleetSpec(pods=2000, nodes=20))
    core = k8s.CoreV1Api(kube_client)
    selected = [
        item["metadata"]["namespace"]
        for body in _pages_raw(core, field_selector="metadata.namespace!=kube-system")
        for item in body["items"]
    ]
    assert len(selected) == fleet.pods_outside({"kube-system"})
    assert "kube-system" not in selected
