"""``hostdatadir-migration`` against the real control plane. The flow runs the real
``helm upgrade --reuse-values`` (changing ``nodeAgent.hostDataDir``) on a release installed by
the real helm; the real DaemonSet controller replaces the pods on 21 kwok nodes following the
chart's update strategy (RollingUpdate, maxUnavailable 1); the kubelet double
(``testkit/kubelet.py``) runs each pod as a real agent with that pod's hostPath and its node's
machine-id; a real Console decides every enrollment, re-bind and release. The nodes mix the three
classes: a host agent present, a re-bind possible, a release needed."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.migration import hostdatadir_migration
from testkit.agents import AgentProcess
from testkit.chart import CHART, RELEASE
from testkit.cluster import KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.console import ConsoleProcess
from testkit.kubelet import FakeHost, KubeletDouble, unavailable_peak
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

NODES = 21
POOL = ("proxima.test/pool", "migration")
QUIET = 2.0
OLD_DIR = "/var/lib/proxima-agent"
NEW_DIR = "/var/lib/proxima-node-agent"
DAEMONSET = f"{RELEASE}-node-agent"
MONITOR = "k8s-node-monitor"
HOST_AGENT, REBIND, RELEASE_NEEDED = "host_agent_present", "rebind_possible", "needs_release"


def node_class(index: int) -> str:
    return (HOST_AGENT, REBIND, RELEASE_NEEDED)[index % 3]


@pytest.fixture
def pool(kube_cluster: KubeCluster) -> Iterator[list[str]]:
    """21 more kwok nodes, labelled for the release's nodeSelector; deleted afterwards."""
    names = [f"mig-{i:02d}" for i in range(NODES)]
    kube_cluster.add_nodes(names, dict([POOL]))
    try:
        yield names
    finally:
        kube_cluster.delete_nodes(names)


@pytest.fixture
def migration_console(
    console_factory: Any, prefect_api_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> ConsoleProcess:
    console: ConsoleProcess = console_factory(
        name="migration-console",
        env={
            "PROXIMA_IDENTITY_QUIET_SECONDS": str(QUIET),
            "PROXIMA_AGENT_STALE_SECONDS": str(QUIET + 1),
            "PROXIMA_PREFECT_API_URL": prefect_api_url,
        },
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.token)
    for key in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):  # the flow's helm
        monkeypatch.setenv(key, str(tmp_path / "flow-helm" / key.lower()))
    return console


def records(console: ConsoleProcess) -> dict[tuple[str, str], dict[str, Any]]:
    with console.client() as c:
        items = c.get("/api/v1/fleet/agents", params={"limit": 1000}).json()["items"]
    return {(a["agent_type"], a["name"]): a for a in items}


def online(console: ConsoleProcess, keys: list[tuple[str, str]]) -> bool:
    found = records(console)
    return all(key in found and found[key]["status"] == "online" for key in keys)


def test_helm_upgrade_reuse_values_moves_21_nodes_each_onto_its_old_record(
    kube_cluster: KubeCluster,
    cluster_cli: ClusterCli,
    helm_binary: Path,
    migration_console: ConsoleProcess,
    namespace: str,
    pool: list[str],
    tmp_path: Path,
) -> None:
    console = migration_console
    token = console.install_token()
    classes = {name: node_class(i) for i, name in enumerate(pool)}
    hosts = {
        name: FakeHost(
            name,
            tmp_path / "nodes" / name,
            # A node needing release first ran its pod before systemd set its machine-id.
            machine_id=None if cls == RELEASE_NEEDED else uuid.uuid4().hex,
            product_uuid=None if cls == RELEASE_NEEDED else str(uuid.uuid4()),
        ).lay_out()
        for name, cls in classes.items()
    }
    host_agents = {
        name: AgentProcess(
            hosts[name].path(OLD_DIR),
            name=name,
            backend_url=console.url,
            install_token=token,
            agent_type="host",
            host_root=hosts[name].root,
            heartbeat="1s",
            log_path=tmp_path / "logs" / f"{name}-host.log",
        )
        for name, cls in classes.items()
        if cls == HOST_AGENT
    }
    values = tmp_path / "values.yaml"
    values.write_text(
        json.dumps(
            {
                "backendUrl": console.url,
                "installToken": {"value": token},
                "clusterAgent": {"enabled": False},
                "nodeAgent": {"nodeSelector": dict([POOL]), "heartbeatInterval": "1s"},
            }
        )
    )
    kubelet = KubeletDouble(
        kube_cluster,
        hosts.values(),
        tmp_path / "kubelet",
        namespace=namespace,
        env={"PROXIMA_ENROLL_BACKOFF_MAX": "0.5s"},
    )
    try:
        for agent in host_agents.values():
            agent.start()
        host_ids = {name: agent.agent_id() for name, agent in host_agents.items()}
        kubelet.start()
        cluster_cli.install(namespace, "-f", str(values))
        wait_for(lambda: len(kubelet.agents()) == NODES, timeout=120, what="a pod on every node")
        # Where the host agent runs, the pod finds its state.json and refuses to start.
        for name in host_agents:
            pod = kubelet.agents()[name]
            wait_for(lambda pod=pod: "belongs to a host agent" in pod.log(), timeout=60,
                     what=f"the pod on {name} refuses")  # fmt: skip
        daemon_only = [n for n, c in classes.items() if c != HOST_AGENT]
        wait_for(
            lambda: online(console, [(MONITOR, n) for n in daemon_only]),
            timeout=120,
            what="every DaemonSet-only node's pod online",
        )
        old_ids = {name: kubelet.agents()[name].agent_id() for name in daemon_only}
        for name, cls in classes.items():
            if cls == RELEASE_NEEDED:  # the machine-id is set now; the record has no evidence
                hosts[name].set_machine_id(uuid.uuid4().hex)

        common: dict[str, Any] = {
            "new_host_data_dir": NEW_DIR,
            "release": RELEASE,
            "chart": str(CHART),
            "namespace": namespace,
            "helm_mode": "helm",
            "helm_binary": str(helm_binary),
            "kubeconfig": str(kube_cluster.admin_kubeconfig),
            "timeout_seconds": 120,
            "poll_seconds": 0.5,
        }
        dry = hostdatadir_migration(dry_run=True, **common)
        assert dry["classes"] == classes
        assert sorted(dry["skipped_nodes"]) == sorted(kube_cluster.node_names)
        assert (dry["from"], dry["to"]) == (OLD_DIR, NEW_DIR)
        rows = {row["node"]: row for row in dry["plan"]}
        for name, cls in classes.items():
            if cls == RELEASE_NEEDED:
                assert (rows[name]["why"], rows[name]["record"]) == ("no_evidence", old_ids[name])
            elif cls == REBIND:
                assert rows[name]["record"] == old_ids[name]
        first_pods = cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET)
        revision_before = {p["metadata"]["labels"]["controller-revision-hash"] for p in first_pods}
        assert len(revision_before) == 1

        started = time.monotonic()
        result = hostdatadir_migration(dry_run=False, **common)
        took = time.monotonic() - started
        print(f"\nhostdatadir-migration apply on {NODES} nodes: {took:.1f} s")

        assert result["passed"], result["checks"]
        assert result["upgrade"]["mode"] == "helm"
        outcomes = {o["node"]: o for o in result["outcomes"]}
        assert {o["outcome"] for o in outcomes.values()} == {"done"}, outcomes
        assert all(c["result"] == "pass" for c in result["checks"])

        # Helm kept the release's values and changed only hostDataDir.
        kept = json.loads(cluster_cli.helm("get", "values", RELEASE, "-n", namespace,
                                           "-o", "json").stdout)  # fmt: skip
        assert kept["nodeAgent"] == {
            "nodeSelector": dict([POOL]),
            "heartbeatInterval": "1s",
            "hostDataDir": NEW_DIR,
        }
        assert kept["backendUrl"] == console.url
        history = json.loads(cluster_cli.helm("history", RELEASE, "-n", namespace,
                                              "-o", "json").stdout)  # fmt: skip
        assert [h["revision"] for h in history] == [1, 2]

        # The DaemonSet controller replaced every pod, one node at a time (maxUnavailable 1,
        # no surge), and each new pod carries the new hostPath.
        ds = cluster_cli.get("daemonset", DAEMONSET, "-n", namespace)
        assert ds["spec"]["updateStrategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
        }
        status = ds["status"]
        assert status["updatedNumberScheduled"] == status["numberReady"] == NODES, status
        pods = cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET)
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(pool)
        revisions = {p["metadata"]["labels"]["controller-revision-hash"] for p in pods}
        assert len(revisions) == 1 and revisions.isdisjoint(revision_before)
        for pod in pods:
            data = next(v for v in pod["spec"]["volumes"] if v["name"] == "data")
            assert data["hostPath"]["path"] == NEW_DIR
        down, crowd = unavailable_peak(kubelet.pod_events(), pool, since=started)
        assert (down, crowd) == (1, 1), (down, crowd)

        # Every node ends on its old record: the same agent id in the Console.
        after = records(console)
        agents = kubelet.agents()
        for name, old_id in old_ids.items():
            assert after[(MONITOR, name)]["id"] == old_id, name
            assert agents[name].state()["agent_id"] == old_id, name
            assert "enrollment_conflict" not in after[(MONITOR, name)]["flags"]
        for name, host_id in host_ids.items():
            assert after[("host", name)]["id"] == host_id
            assert after[("host", name)]["status"] == "online"
            monitor = after[(MONITOR, name)]
            assert monitor["status"] == "online" and monitor["id"] != host_id
            assert agents[name].state()["agent_id"] == monitor["id"]
        for name, host in hosts.items():
            assert agents[name].data_dir.resolve() == host.path(NEW_DIR).resolve()
        for name, cls in classes.items():
            if cls == RELEASE_NEEDED:
                assert "released and re-bound" in outcomes[name]["detail"], outcomes[name]
                kinds = [h["kind"] for h in console.agent(old_ids[name])["history"]]
                assert kinds[:2] == ["rebound", "released"], kinds
        assert kubelet.failures == {}
    finally:
        kubelet.stop()
        for agent in host_agents.values():
            agent.stop()
