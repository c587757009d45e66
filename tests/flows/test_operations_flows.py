"""fleet-audit and identity-release under the Prefect harness, against a real Console, real
NATS, simulated agents and the Kubernetes API double."""

import asyncio
import json
import socket
import threading
import uuid
from datetime import UTC, datetime

import nats
import pytest

from contracts import subjects
from contracts.inventory import InventoryProblem, InventorySnapshot, encode_chunks
from contracts.vocabulary import InventoryProblemKind
from flows.audit import fleet_audit
from flows.identity_release import identity_release
from testkit.console import Identity
from testkit.kube import objects
from testkit.kube.server import KubeApiDouble
from testkit.swarm import Swarm
from testkit.waiting import wait_for


@pytest.fixture
def audit_console(console_factory, prefect_api_url, monkeypatch):
    console = console_factory(
        name="audit-console",
        env={
            "PROXIMA_AGENT_STALE_SECONDS": "3",
            "PROXIMA_IDENTITY_QUIET_SECONDS": "3",
            "PROXIMA_PREFECT_API_URL": prefect_api_url,
            "PROXIMA_K8S_SYNC_INTERVAL": "5m",
        },
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.worker_token())
    return console


def _online(console, n):
    wait_for(
        lambda: (
            console.client()
            .get("/api/v1/fleet/agents", params={"status": "online"})
            .json()["total"]
            >= n
        ),
        what=f"{n} online",
    )


def test_the_audit_finds_nothing_on_a_healthy_fleet(audit_console):
    swarm = Swarm(audit_console, 3, heartbeat_seconds=0.5).start()
    try:
        _online(audit_console, 3)
        result = fleet_audit()
        assert result["findings"] == 0, result
        with audit_console.client() as c:
            latest = c.get("/api/v1/audit/runs/latest").json()
        assert latest["findings"] == [] and latest["id"] == result["audit_run_id"]
    finally:
        swarm.stop()


async def _beat(nc, agent_id, ident, **extra):
    body = {
        "agent_id": agent_id,
        "instance_id": ident.instance_id,
        "agent_type": ident.agent_type,
        "version": extra.pop("version", "0.8.0"),
        "sent_at": datetime.now(UTC).isoformat(),
        "uptime_seconds": 1,
        "heartbeat_interval_seconds": 0.3,
        **extra,
    }
    await nc.publish(subjects.heartbeat(agent_id), json.dumps(body).encode())
    await nc.flush()


async def _stage_failures(console, kube):
    """One of each failure story of the chart's page."""
    token = console.install_token()
    # Two processes on one identity, reporting different versions.
    one = Identity(name="node-1")
    shared_id = one.enroll(console, token).json()["agent_id"]
    two = Identity(name="node-1", seed=one.seed, jwt=one.jwt)
    nc1 = await nats.connect(console.nats_url, **one.nats_options())
    nc2 = await nats.connect(console.nats_url, **two.nats_options())
    for _ in range(3):
        await _beat(nc1, shared_id, one, version="0.8.0")
        await asyncio.sleep(0.05)
        await _beat(nc2, shared_id, two, version="0.7.1")
        await asyncio.sleep(0.05)
    # A pod stuck in 409 after a hostDataDir move (the holder is live).
    holder = Identity(name="node-2", agent_type="k8s-node-monitor")
    holder_id = holder.enroll(console, token).json()["agent_id"]
    nc3 = await nats.connect(console.nats_url, **holder.nats_options())
    await _beat(nc3, holder_id, holder)
    assert (
        Identity(name="node-2", agent_type="k8s-node-monitor").enroll(console, token).status_code
        == 409
    )
    # A revoked agent whose process keeps knocking.
    revoked = Identity(name="old-box")
    revoked_id = revoked.enroll(console, token).json()["agent_id"]
    with console.client() as c:
        c.post(f"/api/v1/fleet/agents/{revoked_id}/revoke").raise_for_status()
    # An offline agent (enrolled, never heartbeats).
    Identity(name="gone-host").enroll(console, token)
    # A collector: sync interval drift, slug mismatch, forbidden rollouts.
    with console.client() as c:
        c.post("/api/v1/clusters", json={"name": "prod", "slug": "prod"}).raise_for_status()
    ctoken = console.install_token(cluster_slug="prod")
    collector = Identity(name="collector-0", agent_type="k8s-cluster-collector")
    cid = collector.enroll(console, ctoken).json()["agent_id"]
    nc4 = await nats.connect(console.nats_url, **collector.nats_options())
    await _beat(
        nc4,
        cid,
        collector,
        sync_interval_seconds=60.0,
        leader=True,
        cluster_slug="production-cluster-named-beyond-the-sixty-three-character-limit-x",
    )
    # Its own cluster's inventory, with Argo Rollouts forbidden (a collector bound to "prod" may
    # feed only "prod": the mismatched slug above shows as slug_mismatch from its heartbeat).
    snap = InventorySnapshot(
        cluster_slug="prod",
        cluster_name="prod",
        collected_at=datetime.now(UTC),
        sync_interval_seconds=60.0,
        counts={"pods": 1},
        errors=["forbidden to read argo rollouts: the chart predates Argo Rollouts"],
        problems=[
            InventoryProblem(
                kind=InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS,
                resource="rollouts",
                message="forbidden to read argo rollouts: the chart predates Argo Rollouts",
            )
        ],
    )
    for chunk in encode_chunks(snap, uuid.uuid4().hex):
        await nc4.publish(subjects.inventory(cid), chunk)
    await nc4.flush()
    # A collector enrolled with the environment's token, syncing a cluster nobody registered.
    stray = Identity(name="stray-collector-0", agent_type="k8s-cluster-collector")
    sid = stray.enroll(console, token).json()["agent_id"]
    nc5 = await nats.connect(console.nats_url, **stray.nats_options())
    await _beat(nc5, sid, stray, sync_interval_seconds=300.0, leader=True, cluster_slug="stray")
    unregistered = InventorySnapshot(
        cluster_slug="stray",
        cluster_name="stray",
        collected_at=datetime.now(UTC),
        sync_interval_seconds=300.0,
        counts={"pods": 1},
    )
    for chunk in encode_chunks(unregistered, uuid.uuid4().hex):
        await nc5.publish(subjects.inventory(sid), chunk)
    await nc5.flush()
    # A host agent on a node whose DaemonSet mounts the host agent's directory.
    Identity(name="worker-1").enroll(console, token)
    kube.put(objects.node("worker-1"))
    kube.put(
        objects.daemonset(
            "proxima-agent-node-agent",
            "proxima-system",
            labels={"app.kubernetes.io/name": "proxima-agent"},
            host_paths={"data": "/var/lib/proxima-agent"},
        )
    )
    return [nc1, nc2, nc3, nc4, nc5], shared_id, revoked


async def test_the_audit_finds_each_staged_failure(audit_console, tmp_path):
    with KubeApiDouble() as kube:
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        conns, shared_id, revoked = await _stage_failures(audit_console, kube)
        try:
            wait_for(lambda: "version_flapping" in audit_console.agent(shared_id)["flags"])
            wait_for(
                lambda: audit_console.client().get("/api/v1/clusters/prod").json()["warnings"],
                what="cluster warnings",
            )
            wait_for(
                lambda: (
                    audit_console.client()
                    .get("/api/v1/fleet/agents", params={"status": "offline", "name": "gone-host"})
                    .json()["total"]
                    == 1
                ),
                what="gone-host offline",
            )
            for _ in range(2):  # the revoked agent's process keeps knocking
                with pytest.raises(nats.errors.Error):
                    await nats.connect(
                        audit_console.nats_url, allow_reconnect=False, **revoked.nats_options()
                    )
            wait_for(
                lambda: (
                    audit_console.client()
                    .get("/api/v1/fleet/agents", params={"flag": "refused_still_connecting"})
                    .json()["total"]
                    == 1
                ),
                what="refused connections noticed",
            )
            result = await asyncio.to_thread(
                fleet_audit, kubeconfig=str(kubeconfig), check_kubernetes=True
            )
        finally:
            for nc in conns:
                await nc.close()
    names = set(result["names"])
    expected = {
        "shared_identity",
        "version_flapping",
        "stuck_in_409",
        "revoked_still_connecting",
        "offline",
        "sync_interval_drift",
        "slug_mismatch",
        "unregistered_cluster",
        "argo_rollouts_forbidden",
        "shared_data_dir",
    }
    assert expected <= names, expected - names
    with audit_console.client() as c:
        latest = c.get("/api/v1/audit/runs/latest").json()
    shared_dir = next(f for f in latest["findings"] if f["name"] == "shared_data_dir")
    assert shared_dir["severity"] == "critical" and "worker-1" in shared_dir["message"]
    assert "nodeAgent.hostDataDir=/var/lib/proxima-node-agent" in shared_dir["fix"]


def test_identity_release_dry_runs_then_releases_and_reports_refusals(audit_console):
    token = audit_console.install_token()
    quiet = Identity(name="moved-node")
    quiet_id = quiet.enroll(audit_console, token).json()["agent_id"]
    revoked = Identity(name="revoked-node")
    revoked_id = revoked.enroll(audit_console, token).json()["agent_id"]
    with audit_console.client() as c:
        c.post(f"/api/v1/fleet/agents/{revoked_id}/revoke").raise_for_status()
    fresh = Identity(name="fresh-node")
    fresh_id = fresh.enroll(audit_console, token).json()["agent_id"]
    ids = [quiet_id, revoked_id, fresh_id]
    dry = identity_release(agent_ids=ids, dry_run=True)  # the Console's dry run and window
    assert [(r["outcome"], r["reason"]) for r in dry["rows"]] == [
        ("refused", "agent_recently_seen"),
        ("refused", "agent_revoked"),
        ("refused", "agent_recently_seen"),
    ]
    assert audit_console.agent(quiet_id)["status"] != "released"
    wait_for(lambda: audit_console.agent(quiet_id)["seconds_since_seen"] > 3.2, timeout=10)
    real = identity_release(agent_ids=[quiet_id, revoked_id], dry_run=False)
    outcome = {r["agent"]: (r["outcome"], r["reason"]) for r in real["rows"]}
    assert outcome == {
        "host/moved-node": ("released", ""),
        "host/revoked-node": ("refused", "agent_revoked"),
    }
    again = Identity(name="moved-node").enroll(audit_console, token)
    assert (again.status_code, again.json()["agent_id"]) == (200, quiet_id)


async def _collector(console, slug, *, inventory: bool):
    token = console.install_token(cluster_slug=slug)
    ident = Identity(name=f"{slug}-collector-0", agent_type="k8s-cluster-collector")
    agent_id = ident.enroll(console, token).json()["agent_id"]
    nc = await nats.connect(console.nats_url, **ident.nats_options())
    await _beat(nc, agent_id, ident, sync_interval_seconds=300.0, leader=True, cluster_slug=slug)
    if inventory:
        snap = InventorySnapshot(
            cluster_slug=slug,
            cluster_name=slug,
            collected_at=datetime.now(UTC),
            sync_interval_seconds=300.0,
            counts={"nodes": 2},
        )
        for chunk in encode_chunks(snap, uuid.uuid4().hex):
            await nc.publish(subjects.inventory(agent_id), chunk)
    await nc.flush()
    return nc


async def test_the_enrollment_check_passes_on_a_healthy_cluster_and_names_what_is_missing(
    audit_console, tmp_path
):
    from flows.enrollment_check import enrollment_check

    with audit_console.client() as c:
        c.post("/api/v1/clusters", json={"name": "good"}).raise_for_status()
        c.post("/api/v1/clusters", json={"name": "silent"}).raise_for_status()
    good = await _collector(audit_console, "good", inventory=True)
    silent = await _collector(audit_console, "silent", inventory=False)
    try:
        ok = await asyncio.to_thread(
            enrollment_check, cluster_slug="good", deadline_seconds=20, poll_seconds=0.2
        )
        assert ok["passed"], ok["report"]
        run = await asyncio.to_thread(
            enrollment_check,
            cluster_slug="silent",
            deadline_seconds=2,
            poll_seconds=0.2,
            return_state=True,
        )
        # A failing check is a Failed run; its report is the run's result.
        assert run.is_failed() and "missing inventory" in (run.message or ""), run
        broken = await run.result(raise_on_failure=False)
        assert not broken["passed"]
        assert (broken["enrollment"], broken["heartbeat"], broken["inventory"]) == (
            True,
            True,
            False,
        )
        assert "Missing: inventory" in broken["report"]
        assert "clusterAgent.clusterSlug" in broken["report"]
        unregistered = await asyncio.to_thread(
            enrollment_check,
            cluster_slug="never-onboarded",
            deadline_seconds=1,
            poll_seconds=0.2,
            return_state=True,
        )
        assert unregistered.is_failed()
        assert "no cluster with this slug" in (unregistered.message or "")
        nothing = await unregistered.result(raise_on_failure=False)
        assert "No cluster with this slug in the Console" in nothing["report"]
        assert "/clusters/add" in nothing["report"]
    finally:
        await good.close()
        await silent.close()


def test_the_enrollment_check_passes_with_a_real_cluster_collector_and_node_agents(
    console_factory, prefect_api_url, monkeypatch, tmp_path
):
    """The flow against real agent processes: a k8s-cluster-collector reading the Kubernetes
    API double, and k8s-node-monitor agents for its nodes."""
    from flows.enrollment_check import enrollment_check
    from testkit.agents import AgentProcess
    from testkit.k8s import cluster_agent, register_cluster

    console = console_factory(name="ec-console", env={"PROXIMA_K8S_SYNC_INTERVAL": "0.5s"})
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.worker_token())
    started: list[AgentProcess] = []
    with KubeApiDouble() as kube:
        for n in ("node-a", "node-b"):
            kube.put(objects.node(n))
        kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
        slug, token = register_cluster(console, "Real Cluster")
        try:
            collector = cluster_agent(
                tmp_path,
                console,
                kube.subprocess_env(kubeconfig),
                token=token,
                cluster_name="Real Cluster",
            )
            started.append(collector.start())
            for n in ("node-a", "node-b"):
                node = AgentProcess(
                    name=n,
                    data_dir=tmp_path / "nodes" / n,
                    backend_url=console.url,
                    install_token=token,
                    agent_type="k8s-node-monitor",
                    env={"PROXIMA_CLUSTER_SLUG": slug, "PROXIMA_HOST_METRICS": "false"},
                )
                started.append(node.start())
            result = enrollment_check(
                cluster_slug=slug,
                deadline_seconds=60,
                poll_seconds=0.3,
                kubeconfig=str(kubeconfig),
                check_nodes=True,
            )
        finally:
            for agent in started:
                agent.stop()
    assert result["passed"], result["report"]
    assert result["node_agents"] == result["nodes"] == 2
    assert result["collector"] == collector.name


async def test_the_enrollment_check_keeps_asking_through_a_lost_console(audit_console):
    """What broke: one connection error from the Console ended enrollment-check. It now asks
    again until its deadline: here the Console is gone (its port drops every connection, then
    refuses them) while the check starts, and comes back with the cluster onboarded."""
    from flows.enrollment_check import enrollment_check

    with audit_console.client() as c:
        c.post("/api/v1/clusters", json={"name": "steady"}).raise_for_status()
    nc = await _collector(audit_console, "steady", inventory=True)
    await nc.close()

    def onboarded():
        with audit_console.client() as c:
            body = c.get("/api/v1/clusters/steady/onboarding").json()
        return body["done"]

    await asyncio.to_thread(wait_for, onboarded, what="steady onboarded")
    audit_console.stop()
    dropped, stop = [], threading.Event()
    listener = socket.create_server(("127.0.0.1", audit_console.port))
    listener.settimeout(0.1)

    def drop_connections():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            dropped.append(conn)
            conn.close()
        listener.close()

    dropper = threading.Thread(target=drop_connections, daemon=True)
    dropper.start()
    check = asyncio.ensure_future(
        asyncio.to_thread(
            enrollment_check,
            cluster_slug="steady",
            deadline_seconds=120,
            poll_seconds=0.2,
            return_state=True,
        )
    )
    try:
        await asyncio.to_thread(
            wait_for, lambda: len(dropped) >= 2, what="the check asked the lost Console twice"
        )
    finally:
        stop.set()
        dropper.join()
    await asyncio.to_thread(audit_console.start)
    run = await check
    assert run.is_completed(), run.message
    assert (await run.result())["passed"]
