"""Watches stream ADDED, MODIFIED, DELETED from a resourceVersion, read by `kubernetes.watch`."""

from __future__ import annotations

import threading

import kubernetes.client as k8s
import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from testkit.kube import KubeApiDouble, objects
from testkit.waiting import wait_for


def test_a_watch_from_a_list_sees_later_changes_in_order(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(objects.pod("before", "default", node_name="n"))
    core = k8s.CoreV1Api(kube_client)
    listed = core.list_namespaced_pod("default")
    seen: list[tuple[str, str]] = []
    stream = watch.Watch()

    def consume() -> None:
        for event in stream.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=20,
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                stream.stop()

    reader = threading.Thread(target=consume)
    reader.start()
    wait_for(lambda: kube_api.requests(verb="watch"), what="the watch to be open")
    kube_api.put(objects.pod("after", "default", node_name="n"))
    kube_api.put(objects.pod("elsewhere", "kube-system", node_name="n"))  # other namespace
    kube_api.set_status("pods", "after", {"phase": "Succeeded"}, namespace="default")
    kube_api.delete("pods", "after", "default")
    reader.join(timeout=20)

    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


def test_a_watch_without_a_version_starts_with_the_current_objects(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    kube_api.put(objects.node("node-000"), objects.node("node-001"))
    events = list(
        watch.Watch().stream(
            k8s.CoreV1Api(kube_client).list_node,
            timeout_seconds=1,
            label_selector="kubernetes.io/hostname=node-001",
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "node-001")]


def test_a_watch_from_a_compacted_version_gets_410(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(kube_client)
    old = core.list_namespaced_pod("default").metadata.resource_version
    kube_api.store.compact()
    with pytest.raises(ApiException) as gone:
        list(
            watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=1
            )
        )
    assert gone.value.status == 410


def test_taking_the_server_down_ends_open_watches(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    core = k8s.CoreV1Api(kube_client)
    ended = threading.Event()

    def consume() -> None:
        try:
            for _ in watch.Watch().stream(
                core.list_namespaced_pod, "default", timeout_seconds=60, _request_timeout=30
            ):
                pass
        except Exception:  # the connection drops, or the stream ends: either way it is over
            pass
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    wait_for(lambda: kube_api.requests(verb="watch"), what="the watch to be open")
    kube_api.down()
    assert ended.wait(timeout=10)
    kube_api.up()
