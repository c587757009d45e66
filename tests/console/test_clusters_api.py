"""Clusters: onboarding records a slug, the collector's inventory lands in chunks, warnings."""

import json
import uuid
from datetime import UTC, datetime

import nats

from contracts import subjects
from contracts.inventory import InventoryProblem, InventorySnapshot, ObjectSummary, encode_chunks
from contracts.views import ClusterView
from contracts.vocabulary import InventoryProblemKind
from testkit.console import Identity
from testkit.waiting import wait_for


def _snapshot(slug, pods=5000, sync=300.0):
    return InventorySnapshot(
        cluster_slug=slug,
        cluster_name="Production RKE2",
        collected_at=datetime.now(UTC),
        sync_interval_seconds=sync,
        kubernetes_version="v1.31.4",
        counts={"nodes": 3, "pods": pods + 10, "namespaces": 4},
        objects={
            "pods": [
                ObjectSummary(name=f"web-{i}", namespace="shop", status="Running")
                for i in range(pods)
            ],
            "nodes": [ObjectSummary(name=f"n{i}") for i in range(3)],
        },
        truncated={"pods": {"limit": pods, "total": pods + 10}},
        errors=["forbidden to read argo rollouts"],
        problems=[
            InventoryProblem(
                kind=InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS,
                resource="rollouts",
                message="forbidden to read argo rollouts",
            )
        ],
    )


async def _publish(console, ident, agent_id, snapshot, sync):
    nc = await nats.connect(console.nats_url, **ident.nats_options())
    try:
        hb = {
            "agent_id": agent_id,
            "instance_id": ident.instance_id,
            "agent_type": "k8s-cluster-collector",
            "version": "0.8.0",
            "sent_at": datetime.now(UTC).isoformat(),
            "uptime_seconds": 1,
            "heartbeat_interval_seconds": 30,
            "sync_interval_seconds": sync,
            "leader": True,
            "cluster_slug": snapshot.cluster_slug,
        }
        await nc.publish(subjects.heartbeat(agent_id), json.dumps(hb).encode())
        chunks = encode_chunks(snapshot, uuid.uuid4().hex, max_payload=2048)
        for chunk in chunks:
            await nc.publish(subjects.inventory(agent_id), chunk)
        await nc.flush()
    finally:
        await nc.close()


def test_cluster_slugs_are_derived_like_the_chart_and_validated(console):
    with console.client() as c:
        r = c.post("/api/v1/clusters", json={"name": "My Cluster (prod)"})
        assert (r.status_code, r.json()["slug"]) == (201, "my-cluster-prod")
        assert (
            c.post("/api/v1/clusters", json={"name": "x", "slug": "Bad_Slug"}).json()["reason"]
            == "bad_slug"
        )
        assert (
            c.post("/api/v1/clusters", json={"name": "My Cluster (prod)"}).json()["reason"]
            == "cluster_exists"
        )
        long = c.post("/api/v1/clusters", json={"name": "a" * 62 + "-b"}).json()
        assert long["slug"] == "a" * 62


async def test_inventory_arrives_in_chunks_and_the_cluster_shows_counts_and_warnings(console):
    with console.client() as c:
        c.post("/api/v1/clusters", json={"name": "Production RKE2"}).raise_for_status()
    token = console.install_token(cluster_slug="production-rke2")
    ident = Identity(name="proxima-agent-cluster-agent-0", agent_type="k8s-cluster-collector")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    snapshot = _snapshot("production-rke2")
    assert len(encode_chunks(snapshot, "x", max_payload=2048)) > 1, "the test must chunk"
    await _publish(console, ident, agent_id, snapshot, sync=60.0)
    with console.client() as c:
        cluster = wait_for(
            lambda: (
                (x := c.get("/api/v1/clusters/production-rke2").json())["last_inventory_at"]
                and x["agents"]
                and x["agents"][0]["sync_interval_seconds"] is not None
                and x
            ),
            what="inventory and heartbeat stored",
        )
        assert cluster["counts"]["pods"] == 5010
        assert cluster["first_inventory_at"]
        kinds = {w["kind"] for w in cluster["warnings"]}
        assert {"sync_interval_drift", "inventory_truncated", "inventory_errors"} <= kinds
        assert "slug_mismatch" not in kinds
        # The same problem as a fact, for the flows: kind, resource, message.
        assert cluster["inventory_problems"] == [
            {
                "kind": "forbidden_argo_rollouts",
                "resource": "rollouts",
                "message": "forbidden to read argo rollouts",
            }
        ]
        listed = [ClusterView.model_validate(x) for x in c.get("/api/v1/clusters").json()]
        assert [p.kind for p in listed[0].inventory_problems] == [
            InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS
        ]
        assert cluster["agents"][0]["leader"] is True
        inv = c.get(
            "/api/v1/clusters/production-rke2/inventory",
            params={"kind": "pods", "limit": 10, "offset": 20},
        ).json()
        assert inv["total"] == 5000 and [p["name"] for p in inv["items"]][:1] == ["web-20"]


async def test_a_collector_reporting_another_slug_is_flagged_on_the_recorded_cluster(console):
    with console.client() as c:
        c.post("/api/v1/clusters", json={"name": "eu", "slug": "eu-west-1"}).raise_for_status()
    token = console.install_token(cluster_slug="eu-west-1")
    ident = Identity(name="collector-0", agent_type="k8s-cluster-collector")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    long_slug = "europe-west-1-production-cluster-with-a-very-long-name-that-overflows-sixty-three"
    await _publish(console, ident, agent_id, _snapshot(long_slug, pods=3), sync=300.0)
    with console.client() as c:
        recorded = wait_for(
            lambda: (x := c.get("/api/v1/clusters/eu-west-1").json())["warnings"] and x,
            what="slug mismatch",
        )
        assert [w["kind"] for w in recorded["warnings"]] == ["slug_mismatch"]
        assert "set clusterAgent.clusterSlug=eu-west-1" in recorded["warnings"][0]["message"]
        # Its token ties it to eu-west-1: the snapshot for another slug is refused, not stored
        # as a stray cluster (a collector feeds only the cluster it is tied to).
        assert recorded["last_inventory_at"] is None
        stray = c.get(f"/api/v1/clusters/{long_slug}")
        assert (stray.status_code, stray.json()["reason"]) == (404, "cluster_not_found")


async def test_a_collector_of_an_environment_wide_token_feeds_only_unclaimed_slugs(console):
    """An environment-wide token's collector may report a slug onboarding never recorded (the
    cluster shows as unregistered), but never one a cluster-bound token was minted for."""
    with console.client() as c:
        c.post("/api/v1/clusters", json={"name": "eu", "slug": "eu-west-1"}).raise_for_status()
    console.install_token(cluster_slug="eu-west-1")
    ident = Identity(name="collector-0", agent_type="k8s-cluster-collector")
    agent_id = ident.enroll(console, console.install_token()).json()["agent_id"]
    await _publish(console, ident, agent_id, _snapshot("eu-west-1", pods=3), sync=300.0)
    await _publish(console, ident, agent_id, _snapshot("stray-one", pods=3), sync=300.0)
    with console.client() as c:
        stray = wait_for(
            lambda: (r := c.get("/api/v1/clusters/stray-one")).status_code == 200 and r.json(),
            what="the unregistered cluster",
        )
        assert stray["registered"] is False
        assert "unregistered" in {w["kind"] for w in stray["warnings"]}
        assert c.get("/api/v1/clusters/eu-west-1").json()["last_inventory_at"] is None
