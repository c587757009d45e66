"""hostdatadir-migration end to end: the Prefect harness, a real Console (and its NATS), the
Kubernetes API double holding the chart's DaemonSet as the real helm renders it, and real agent
processes as host agents and DaemonSet pods on five fake nodes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.helm import HelmCli, HelmRelease
from flows.hostdatadir.errors import MigrationBlockedError
from flows.hostdatadir.manifests import data_host_path, readable_host_identity, runs_on
from flows.hostdatadir.progress import NodeState, judge
from flows.migration import hostdatadir_migration
from rollout_policy import AgentId, MigrationRow, NodeClass, NodeName
from testkit.agents import AgentProcess
from testkit.console import Identity
from testkit.kube import KubeApiDouble, objects
from testkit.migration import (
    CHART,
    DAEMONSET,
    DEFAULT_DIR,
    NAMESPACE,
    NODE_MONITOR,
    FakeNode,
    Kubelet,
    chart_values,
    data_path_of,
    helm_binary,
    helm_template,
    rendered_daemonset,
)
from testkit.views import agent_view, conflict_view
from testkit.waiting import wait_for

QUIET = 2.0
NEW_DIR = "/var/lib/proxima-node-agent"
HOST_AGENT_NODES = ("worker-1", "worker-2")
REBIND_NODES = ("worker-3", "worker-4")
RELEASE_NODE = "worker-5"


@pytest.fixture
def migration_console(console_factory, prefect_api_url, monkeypatch):
    console = console_factory(
        name="migration-console",
        env={
            "PROXIMA_IDENTITY_QUIET_SECONDS": str(QUIET),
            "PROXIMA_AGENT_STALE_SECONDS": str(QUIET),
            "PROXIMA_PREFECT_API_URL": prefect_api_url,
        },
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.worker_token())
    return console


def _records(console) -> dict[tuple[str, str], dict[str, Any]]:
    with console.client() as c:
        items = c.get("/api/v1/fleet/agents", params={"limit": 1000}).json()["items"]
    return {(a["agent_type"], a["name"]): a for a in items}


def _summary(records: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], tuple]:
    return {key: (a["id"], a["instance_id"], a["status"]) for key, a in records.items()}


def _all_online(console, keys) -> bool:
    records = _records(console)
    return all(key in records and records[key]["status"] == "online" for key in keys)


async def _artifacts(*keys: str, since: datetime) -> dict[str, list[Any]]:
    """The artifacts under each key created since ``since``, oldest first: the harness's server
    is shared by the whole session (tests/cluster runs the same flow with the same keys)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys))),
            sort=ArtifactSort.CREATED_DESC,
            limit=20,
        )
    by_key: dict[str, list[Any]] = {key: [] for key in keys}
    for artifact in reversed(found):
        if artifact.created is not None and artifact.created >= since:
            by_key[artifact.key].append(artifact)
    return by_key


async def test_a_5_node_cluster_mixing_all_three_classes_moves_with_every_node_on_its_record(
    migration_console, tmp_path: Path
):
    console = migration_console
    started = datetime.now(UTC)
    helm = helm_binary()
    token = console.install_token()
    nodes = {
        name: FakeNode(name, tmp_path / "nodes" / name)
        for name in (*HOST_AGENT_NODES, *REBIND_NODES, RELEASE_NODE)
    }
    for name, node in nodes.items():
        node.root.mkdir(parents=True)
        if name != RELEASE_NODE:  # worker-5's pod first ran with no readable machine-id
            node.make_identity_readable()
    logs = tmp_path / "logs"
    logs.mkdir()
    hosts = {
        name: AgentProcess(
            name=name,
            data_dir=nodes[name].dir(DEFAULT_DIR),
            backend_url=console.url,
            install_token=token,
            agent_type="host",
            host_root=nodes[name].root,
            log_path=logs / f"{name}-host.log",
        )
        for name in HOST_AGENT_NODES
    }
    values = chart_values(tmp_path / "values.yaml", backend_url=console.url)
    kube = KubeApiDouble().start()
    kubelet = Kubelet(kube, nodes.values(), backend_url=console.url, install_token=token, logs=logs)
    try:
        for host in hosts.values():
            host.start()
        host_ids = {name: host.agent_id() for name, host in hosts.items()}
        kube.put(*(objects.node(name, index=i) for i, name in enumerate(nodes)))
        kubelet.start()
        kube.apply_manifests(
            helm_template(helm, values, tmp_path / "helm-home"), namespace=NAMESPACE
        )
        wait_for(lambda: kubelet.host_path == DEFAULT_DIR, what="pods started", timeout=30)
        # On the host-agent nodes the pod finds the host agent's state.json and refuses.
        for name in HOST_AGENT_NODES:
            pod = kubelet.pods[name]
            wait_for(lambda pod=pod: not pod.alive, timeout=30, what=f"{name} pod refuses")
            assert "belongs to a host agent" in pod.log(), pod.log()[-2000:]
        old_ids = {name: kubelet.pods[name].agent_id() for name in (*REBIND_NODES, RELEASE_NODE)}
        nodes[RELEASE_NODE].make_identity_readable()  # the host identity became readable later
        monitors = [(NODE_MONITOR, n) for n in old_ids]
        wait_for(
            lambda: _all_online(console, [*monitors, *(("host", n) for n in HOST_AGENT_NODES)]),
            what="every agent online",
            timeout=30,
        )
        kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
        common: dict[str, Any] = {
            "new_host_data_dir": NEW_DIR,
            "chart": str(CHART),
            "namespace": NAMESPACE,
            "helm_mode": "render-apply",
            "helm_binary": helm,
            "values_files": [str(values)],
            "kubeconfig": kubeconfig,
            "timeout_seconds": 60,
            "poll_seconds": 0.2,
        }

        # --- dry run: the plan, and nothing changes ---------------------------------------
        records_before = _records(console)
        pids_before = kubelet.pids()
        dry = await asyncio.to_thread(hostdatadir_migration, dry_run=True, **common)
        assert dry["classes"] == {
            "worker-1": "host_agent_present",
            "worker-2": "host_agent_present",
            "worker-3": "rebind_possible",
            "worker-4": "rebind_possible",
            "worker-5": "needs_release",
        }
        rows = {row["node"]: row for row in dry["plan"]}
        assert rows["worker-5"]["why"] == "no_evidence"
        assert rows["worker-5"]["record"] == old_ids["worker-5"]
        assert {rows[n]["record"] for n in REBIND_NODES} == {old_ids[n] for n in REBIND_NODES}
        assert all(row["host identity"] == "readable" for row in rows.values())
        assert (dry["from"], dry["to"]) == (DEFAULT_DIR, NEW_DIR)
        assert "outcomes" not in dry
        assert kubelet.pids() == pids_before and kubelet.rollouts == 1
        assert _summary(_records(console)) == _summary(records_before)
        assert data_path_of(kube.get("daemonsets.apps", DAEMONSET, NAMESPACE)) == DEFAULT_DIR

        # --- apply: every node ends on its old record id ----------------------------------
        result = await asyncio.to_thread(hostdatadir_migration, dry_run=False, **common)
        assert result["passed"], result["checks"]
        assert result["upgrade"]["applied"] == [f"DaemonSet/{NAMESPACE}/{DAEMONSET} replaced"]
        outcomes = {o["node"]: o for o in result["outcomes"]}
        assert {o["outcome"] for o in outcomes.values()} == {"done"}, outcomes
        assert "released and re-bound" in outcomes[RELEASE_NODE]["detail"]
        assert data_path_of(kube.get("daemonsets.apps", DAEMONSET, NAMESPACE)) == NEW_DIR
        assert kubelet.host_path == NEW_DIR and kubelet.rollouts == 2

        after = _records(console)
        for name, old_id in old_ids.items():
            assert after[(NODE_MONITOR, name)]["id"] == old_id, name
            assert kubelet.pods[name].state()["agent_id"] == old_id
        for name in HOST_AGENT_NODES:
            monitor = after[(NODE_MONITOR, name)]
            assert monitor["id"] != host_ids[name] and monitor["status"] == "online"
            assert after[("host", name)]["id"] == host_ids[name]
            assert after[("host", name)]["status"] == "online"
            assert hosts[name].alive
            assert kubelet.pods[name].state()["agent_id"] == monitor["id"]
        for name in nodes:
            assert kubelet.pods[name].data_dir == nodes[name].dir(NEW_DIR)
            assert "enrollment_conflict" not in after[(NODE_MONITOR, name)]["flags"]
        history = console.agent(old_ids[RELEASE_NODE])["history"]
        assert [h["kind"] for h in history][:2] == ["rebound", "released"], history
        assert result["checks"], "the migration verified nothing"
        assert all(c["result"] == "pass" for c in result["checks"])
        artifacts = await _artifacts(
            "hostdatadir-migration-plan",
            "hostdatadir-migration-progress",
            "hostdatadir-migration-verify",
            since=started,
        )
        plans = artifacts["hostdatadir-migration-plan"]
        assert [a.description.split(":")[0] for a in plans] == ["Dry run", "Apply"]
        assert [a.data for a in artifacts["hostdatadir-migration-progress"]] == [100.0]
        (report,) = artifacts["hostdatadir-migration-verify"]
        assert report.description == "pass" and "PASS" in report.data
    finally:
        kubelet.stop()
        for host in hosts.values():
            host.stop()
        kube.stop()


# --- the pure parts, against what the real helm renders --------------------------------------


@pytest.fixture(scope="module")
def render(tmp_path_factory):
    helm = helm_binary()
    base = tmp_path_factory.mktemp("render")
    values = chart_values(base / "values.yaml", backend_url="https://console.example")

    def daemonset(*sets: str) -> dict[str, Any]:
        return rendered_daemonset(helm_template(helm, values, base / "home", *sets))

    return daemonset


def test_the_pods_read_the_host_identity_only_through_host_mounts_of_the_host_files(render):
    assert readable_host_identity(render()) == ("machine-id", "dmi")
    # Without its own mount, DMI still comes through the host's /sys (hostMetrics).
    assert readable_host_identity(render("nodeAgent.hostIdentity.dmi=false")) == (
        "machine-id",
        "dmi",
    )
    machine_id_only = render("nodeAgent.hostIdentity.dmi=false", "nodeAgent.hostMetrics=false")
    assert readable_host_identity(machine_id_only) == ("machine-id",)
    no_identity = render("nodeAgent.hostIdentity.enabled=false")
    assert readable_host_identity(no_identity) == ("dmi",)
    bare = render("nodeAgent.hostIdentity.enabled=false", "nodeAgent.hostMetrics=false")
    assert readable_host_identity(bare) == ()
    assert data_host_path(render(f"nodeAgent.hostDataDir={NEW_DIR}")) == NEW_DIR


def test_the_plan_covers_the_nodes_the_daemonset_runs_on(render):
    plain = objects.node("worker-1")
    control = objects.node("cp-1", control_plane=True)
    windows = objects.node("win-1", labels={"kubernetes.io/os": "windows"})
    not_ready = objects.node("worker-2")
    not_ready["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    ds = render()
    assert [runs_on(n, ds) for n in (plain, control, windows, not_ready)] == [
        True,
        False,
        False,
        True,
    ]
    tolerant = render("nodeAgent.tolerations[0].operator=Exists")
    assert runs_on(control, tolerant) and not runs_on(windows, tolerant)


def _row(node_class: NodeClass, agent_id: str | None = "ag-1") -> MigrationRow:
    return MigrationRow(
        node=NodeName("worker-1"),
        node_class=node_class,
        agent_id=AgentId(agent_id) if agent_id else None,
        reasons=(),
        host_agent_running=False,
        host_identity_readable=True,
        action="",
        releasable=True,
    )


def _view(status: str, instance: str, *, since: float = 0.5, conflict: tuple | None = None):
    clash: dict[str, Any] = {}
    if conflict:
        clash = {"flags": ["enrollment_conflict"], "conflict": conflict_view(*conflict)}
    return agent_view(
        "ag-1",
        "worker-1",
        NODE_MONITOR,
        status=status,
        instance_id=instance,
        seconds_since_seen=since,
        **clash,
    )


def test_a_refused_rebind_is_released_once_quiet_and_a_live_record_is_never_released():
    rebind = _row(NodeClass.REBIND_POSSIBLE)
    before = _view("online", "i-old", conflict=("name_in_use", 4))
    # The pod has not moved yet; then it gets name_in_use while the old record goes quiet.
    assert judge(rebind, before, before, window=2, released=False).state is NodeState.WAITING
    clash = _view("offline", "i-old", since=1.0, conflict=("name_in_use", 5))
    assert judge(rebind, before, clash, window=2, released=False).state is NodeState.CONFLICT
    # The Console refused the re-bind (no host identity after all): released once quiet.
    refused = _view("offline", "i-old", since=1.0, conflict=("identity_mismatch", 6))
    verdict = judge(rebind, before, refused, window=2, released=False)
    assert (verdict.state, verdict.release) == (NodeState.WAITING_QUIET, None)
    quiet = _view("offline", "i-old", since=2.5, conflict=("identity_mismatch", 7))
    assert judge(rebind, before, quiet, window=2, released=False).release == "ag-1"
    # A conflict from before the move does not count as a refusal now.
    stale = _view("offline", "i-old", since=9, conflict=("name_in_use", 4))
    assert judge(rebind, before, stale, window=2, released=False).release is None
    back = _view("online", "i-new")
    assert judge(rebind, before, back, window=2, released=False).detail == "re-bound to ag-1"


def test_a_fresh_or_host_agent_node_is_done_when_its_new_record_is_online():
    row = _row(NodeClass.HOST_AGENT_PRESENT, agent_id=None)
    assert judge(row, None, None, window=2, released=False).state is NodeState.WAITING
    verdict = judge(row, None, _view("online", "i-1"), window=2, released=False)
    assert (verdict.state, verdict.detail) == (NodeState.DONE, "enrolled as ag-1")


def test_helm_upgrade_reuses_the_release_values_and_sets_only_the_new_directory():
    cli = HelmCli(binary=helm_binary())
    release = HelmRelease(
        "proxima-agent", "proxima/proxima-agent", "proxima-system", kubeconfig="/kc"
    )
    assert cli.command(release, {"nodeAgent.hostDataDir": NEW_DIR})[1:] == [
        "upgrade",
        "--install",
        "proxima-agent",
        "proxima/proxima-agent",
        "--namespace",
        "proxima-system",
        "--reuse-values",
        "--set",
        f"nodeAgent.hostDataDir={NEW_DIR}",
        "--kubeconfig",
        "/kc",
    ]


async def test_an_apply_with_a_revoked_record_on_a_node_changes_nothing(
    migration_console, tmp_path: Path
):
    """A revoked record holds worker-1's name: release refuses it, so the move could never
    finish there. The apply stops before helm and says what to do."""
    console = migration_console
    token = console.install_token()
    holder = Identity(name="worker-1", agent_type=NODE_MONITOR)
    revoked_id = holder.enroll(console, token).json()["agent_id"]
    with console.client() as c:
        c.post(f"/api/v1/fleet/agents/{revoked_id}/revoke").raise_for_status()
    helm = helm_binary()
    values = chart_values(tmp_path / "values.yaml", backend_url=console.url)
    with KubeApiDouble() as kube:
        kube.put(objects.node("worker-1"), objects.node("worker-2", index=1))
        kube.apply_manifests(helm_template(helm, values, tmp_path / "home"), namespace=NAMESPACE)
        kwargs: dict[str, Any] = {
            "dry_run": False,
            "chart": str(CHART),
            "helm_mode": "render-apply",
            "helm_binary": helm,
            "values_files": [str(values)],
            "kubeconfig": str(kube.write_kubeconfig(tmp_path / "kubeconfig")),
        }
        with pytest.raises(MigrationBlockedError) as blocked:
            await asyncio.to_thread(hostdatadir_migration, **kwargs)
        assert [row.node for row in blocked.value.rows] == ["worker-1"]
        assert "revoked" in str(blocked.value)
        assert data_path_of(kube.get("daemonsets.apps", DAEMONSET, NAMESPACE)) == DEFAULT_DIR
        dry = await asyncio.to_thread(hostdatadir_migration, **{**kwargs, "dry_run": True})
        assert dry["classes"] == {"worker-1": "needs_release", "worker-2": "fresh"}
        assert dry["plan"][0]["why"].split(", ")[0] == "revoked"
