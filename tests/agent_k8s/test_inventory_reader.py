"""One relist, in this process against the API double: what each failure does to a sync, the
summaries, and the client configured in-cluster from a ServiceAccount mount."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.cluster import (
    ClusterCollector,
    InventoryConfig,
    InventoryReader,
    KubernetesUnavailableError,
)
from agent.cluster.client import ClientConfigError, make_api_client
from agent.cluster.kinds import KINDS
from agent.settings import AgentSettings
from contracts import subjects
from contracts.inventory import InventoryProblem, assemble, split_chunk
from contracts.vocabulary import AgentType
from contracts.vocabulary.inventory import InventoryProblemKind
from testkit.agent_state import make_state
from testkit.kube import FleetSpec, KubeApiDouble, objects, preload_fleet

CONFIG = InventoryConfig("Prod", "prod", 300.0, pod_limit=5000)
SPEC = FleetSpec(pods=90, nodes=3, app_namespaces=3, rollouts=1)


def _kinds(reading: Any) -> set[str]:
    return set(reading.snapshot.counts)


def test_every_kind_is_read_and_summarized(kube_api: KubeApiDouble, kube_client: Any) -> None:
    fleet = preload_fleet(kube_api, SPEC)
    reading = InventoryReader(kube_client).read(CONFIG)
    assert _kinds(reading) == {k.plural for k in KINDS}
    counts = reading.snapshot.counts
    assert counts["pods"] == 90 and counts["nodes"] == 3
    assert counts["deployments"] == fleet.counts["Deployment"]
    assert counts["cronjobs"] == fleet.counts["CronJob"]
    statuses = {p.status for p in reading.snapshot.objects["pods"]}
    assert "Running" in statuses and "Succeeded" in statuses
    node = reading.snapshot.objects["nodes"][0]
    assert node.status == "Ready" and node.detail["kubelet_version"] == "v1.33.1"
    assert node.detail["machine_id"]


def test_a_crash_looping_pod_shows_the_reason_like_kubectl(
    kube_api: KubeApiDouble, kube_client: Any
) -> None:
    pod = objects.pod("api-0", "default", node_name="n1", phase="Running")
    pod["status"]["containerStatuses"] = [
        {
            "name": "api",
            "ready": False,
            "restartCount": 7,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        }
    ]
    kube_api.put(pod)
    reading = InventoryReader(kube_client).read(CONFIG)
    (summary,) = reading.snapshot.objects["pods"]
    assert summary.status == "CrashLoopBackOff"
    assert summary.detail["restarts"] == 7 and summary.detail["ready"] == "0/1"


def test_an_expired_continue_token_relists_that_kind_from_the_start(
    kube_api: KubeApiDouble, kube_client: Any
) -> None:
    preload_fleet(kube_api, SPEC)
    reader = InventoryReader(kube_client, page_size=20)
    real = reader._listers["pods"]
    calls = []

    def compacting(**kwargs: Any) -> Any:
        calls.append(kwargs.get("_continue"))
        answer = real(**kwargs)
        if len(calls) == 2:
            kube_api.store.compact()  # etcd compaction between two pages
        return answer

    reader._listers["pods"] = compacting
    reading = reader.read(CONFIG)
    assert reading.snapshot.counts["pods"] == 90
    assert len(reading.snapshot.objects["pods"]) == 90
    assert [r.status for r in kube_api.requests(resource="pods")].count(410) == 1
    assert calls.count(None) == 2  # listed again from the start


def test_a_forbidden_kind_is_left_out_and_named_while_the_rest_flows(
    kube_api: KubeApiDouble, kube_client: Any
) -> None:
    preload_fleet(kube_api, SPEC)
    kube_api.forbid("cronjobs", group="batch", verbs=["list"])
    kube_api.set_rollouts("forbidden")
    reading = InventoryReader(kube_client).read(CONFIG)
    assert set(reading.problems) == {"cronjobs", "rollouts"}
    assert "cronjobs" not in reading.snapshot.counts
    assert reading.snapshot.counts["pods"] == 90
    errors = reading.snapshot.errors
    assert errors[0].startswith("forbidden to read cronjobs (batch/v1)")
    assert errors[1].startswith("forbidden to read argo rollouts")
    problems = reading.snapshot.problems
    assert problems is not None
    assert [(p.kind, p.resource, p.message) for p in problems] == [
        (InventoryProblemKind.FORBIDDEN, "cronjobs", errors[0]),
        (InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS, "rollouts", errors[1]),
    ]


def test_another_refusal_of_a_kind_is_unreadable_while_the_rest_flows(
    kube_api: KubeApiDouble, kube_client: Any
) -> None:
    preload_fleet(kube_api, SPEC)
    kube_api.fail("jobs", code=400, group="batch", verbs="list", message="bad selector")
    reading = InventoryReader(kube_client).read(CONFIG)
    assert reading.snapshot.counts["pods"] == 90 and "jobs" not in reading.snapshot.counts
    assert reading.snapshot.errors == ["cannot read jobs (batch/v1): 400: bad selector"]
    assert reading.snapshot.problems == [
        InventoryProblem(
            kind=InventoryProblemKind.UNREADABLE,
            resource="jobs",
            message="cannot read jobs (batch/v1): 400: bad selector",
        )
    ]


def test_a_clean_sync_says_it_has_no_problems(kube_api: KubeApiDouble, kube_client: Any) -> None:
    """An empty list, not None: None is what an agent that does not send problems yet says."""
    preload_fleet(kube_api, SPEC)
    assert InventoryReader(kube_client).read(CONFIG).snapshot.problems == []


@pytest.mark.parametrize("code", [500, 503, 429, 401])
def test_a_failing_api_server_abandons_the_sync(
    kube_api: KubeApiDouble, kube_client: Any, code: int
) -> None:
    preload_fleet(kube_api, SPEC)
    kube_api.fail("services", code=code, verbs="list")
    with pytest.raises(KubernetesUnavailableError) as caught:
        InventoryReader(kube_client).read(CONFIG)
    assert caught.value.status == code


def test_the_api_server_down_is_unavailable_not_a_crash(
    kube_api: KubeApiDouble, kube_client: Any
) -> None:
    kube_api.down()
    with pytest.raises(KubernetesUnavailableError) as caught:
        InventoryReader(kube_client).read(CONFIG)
    assert caught.value.detail == "connection refused"


def test_in_cluster_configuration_from_a_service_account_mount(tmp_path: Path) -> None:
    with KubeApiDouble(tls=True) as kube:
        preload_fleet(kube, FleetSpec(pods=10, nodes=1, app_namespaces=1, rollouts=0))
        mount = kube.write_service_account(tmp_path / "sa")
        api = make_api_client(mount, user_agent="proxima-agent/test", environ=kube.in_cluster_env())
        try:
            reading = InventoryReader(api).read(CONFIG)
        finally:
            api.close()
        assert reading.snapshot.counts["pods"] == 10
        assert {r.user_agent for r in kube.requests(resource="pods")} == {"proxima-agent/test"}
    with pytest.raises(ClientConfigError) as caught:
        make_api_client(tmp_path / "nowhere", user_agent="x", environ={})
    assert "in-cluster" in str(caught.value)


async def test_the_collector_collects_chunks_under_a_max_payload_and_heartbeats_as_leader(
    kube_api: KubeApiDouble,
) -> None:
    preload_fleet(kube_api, SPEC)
    settings = AgentSettings(
        agent_type="k8s-cluster-collector", cluster_name="Prod West", pod_limit=50
    )
    state = make_state(agent_type=AgentType.K8S_CLUSTER_COLLECTOR, name="prod-cluster-agent-0")
    collector = ClusterCollector(settings, state, api_factory=kube_api.api_client)
    publications = await collector.collect(max_payload=2048)
    assert len(publications) > 1
    assert {p.subject for p in publications} == {subjects.inventory(state.agent_id)}
    assert all(len(p.payload) <= 2048 for p in publications)
    snapshot = assemble([split_chunk(p.payload) for p in publications])
    assert (snapshot.cluster_slug, snapshot.cluster_name) == ("prod-west", "Prod West")
    assert snapshot.truncated == {"pods": {"limit": 50, "total": 90}}
    assert collector.heartbeat_fields() == {
        "sync_interval_seconds": 300.0,
        "leader": True,
        "cluster_slug": "prod-west",
        "metrics_interval_seconds": None,
    }
