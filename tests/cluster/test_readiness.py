"""Node agent readiness means "running and working", not "enrolled".

On the real control plane (kube-apiserver, the DaemonSet controller, the scheduler, kwok nodes),
with the kubelet double reporting each pod's Ready condition **from the agent's own
readinessProbe** (``testkit/probes.py``: the pods carry ``proxima.test/kubelet-double``, so kwok
does not mark them Ready), and a real Console deciding every enrollment:

(a) a live ``hostDataDir`` move of N DaemonSet-only nodes completes ``helm upgrade --wait`` well
    inside one quiet window, and every node is re-bound onto its old record in about one quiet
    window, not N: the rolling update no longer waits out each node's 409s in turn (with
    readiness = enrolled, ``--timeout`` of (N - 1) quiet windows runs out);
(b) each refused pod carries a ``Warning`` Event ``EnrollmentRefused`` with the Console's words,
    read back through the API server with ``kubectl get events --field-selector``, then a
    ``Normal`` ``Enrolled`` Event; the Console flags and records the clash;
(c) stopping the Console (and its NATS) leaves every agent pod Ready.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.chart import CHART, RELEASE
from testkit.cluster import PROBED_ANNOTATION, KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.console import ConsoleProcess
from testkit.kubelet import FakeHost, KubeletDouble
from testkit.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

NODES = 4
QUIET = 20.0
POOL = ("proxima.test/pool", "readiness")
NEW_DIR = "/var/lib/proxima-node-agent"
DAEMONSET = f"{RELEASE}-node-agent"
MONITOR = "k8s-node-monitor"
FAST_PROBE = {"initialDelaySeconds": 0, "periodSeconds": 1, "timeoutSeconds": 1}


@pytest.fixture
def pool(kube_cluster: KubeCluster) -> Iterator[list[str]]:
    names = [f"rdy-{i}" for i in range(NODES)]
    kube_cluster.add_nodes(names, dict([POOL]))
    try:
        yield names
    finally:
        kube_cluster.delete_nodes(names)


def records(console: ConsoleProcess) -> dict[str, dict[str, Any]]:
    with console.client() as c:
        items = c.get("/api/v1/fleet/agents", params={"limit": 1000}).json()["items"]
    return {a["name"]: a for a in items if a["agent_type"] == MONITOR}


def ready_pods(cli: ClusterCli, namespace: str) -> dict[str, bool]:
    """Pod name -> its Ready condition, as the API server holds it."""
    return {
        pod["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
        for pod in cli.pods_of(namespace, "DaemonSet", DAEMONSET)
        if not pod["metadata"].get("deletionTimestamp")
    }


def test_a_hostdatadir_move_takes_one_quiet_window_refusals_are_events_and_an_outage_is_ready(
    kube_cluster: KubeCluster,
    cluster_cli: ClusterCli,
    console_factory: Any,
    namespace: str,
    pool: list[str],
    tmp_path: Path,
) -> None:
    console: ConsoleProcess = console_factory(
        name="readiness-console",
        env={
            "PROXIMA_IDENTITY_QUIET_SECONDS": str(QUIET),
            "PROXIMA_AGENT_STALE_SECONDS": str(QUIET + 1),
        },
    )
    hosts = [
        FakeHost(name, tmp_path / "nodes" / name, uuid.uuid4().hex, str(uuid.uuid4())).lay_out()
        for name in pool
    ]
    values = tmp_path / "values.yaml"
    values.write_text(
        json.dumps(
            {
                "backendUrl": console.url,
                "installToken": {"value": console.install_token()},
                "clusterAgent": {"enabled": False},
                "nodeAgent": {
                    "nodeSelector": dict([POOL]),
                    "heartbeatInterval": "1s",
                    "podAnnotations": {PROBED_ANNOTATION: "probes"},
                    "readinessProbe": {**FAST_PROBE, "failureThreshold": 1},
                    # A Python agent takes seconds to start: as with the chart's 15 s default, a
                    # liveness probe before that restarts it forever.
                    "livenessProbe": {**FAST_PROBE, "initialDelaySeconds": 15},
                },
            }
        )
    )
    kubelet = KubeletDouble(
        kube_cluster,
        hosts,
        tmp_path / "kubelet",
        namespace=namespace,
        env={"PROXIMA_ENROLL_BACKOFF_MAX": "0.5s"},
    )
    try:
        kubelet.start()
        cluster_cli.install(namespace, "-f", str(values))
        wait_for(
            lambda: all(records(console).get(n, {}).get("status") == "online" for n in pool),
            timeout=120,
            what="every node's agent online",
        )
        old_ids = {name: kubelet.agents()[name].agent_id() for name in pool}
        old_pods = set(ready_pods(cluster_cli, namespace))

        # (a) The move. With readiness = enrolled, each node's pod would stay unready through
        # its quiet window and this --timeout ((N - 1) windows) would run out.
        started = time.monotonic()
        cluster_cli.helm(
            "upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values",
            "--set", f"nodeAgent.hostDataDir={NEW_DIR}",
            "--wait", "--timeout", f"{(NODES - 1) * QUIET:.0f}s",
        )  # fmt: skip
        upgraded = time.monotonic() - started
        pods_now = cluster_cli.kubectl("get", "pods", "-n", namespace).stdout
        refusing = {
            name: agent.connectedz()
            for name, agent in kubelet.agents().items()
            if "409" in agent.connectedz()[1]
        }
        print(f"\nhelm upgrade --wait, {NODES} nodes, quiet window {QUIET:g} s: {upgraded:.1f} s")
        print(f"refusing right then: {sorted(refusing)}\n$ kubectl get pods\n{pods_now}")
        assert upgraded < 1.5 * QUIET, upgraded  # the --timeout holds it under N - 1 windows
        pods = ready_pods(cluster_cli, namespace)
        assert len(pods) == NODES and not set(pods) & old_pods and all(pods.values()), pods

        def rebound() -> bool:
            found = records(console)
            agents = kubelet.agents()
            return all(
                found.get(n, {}).get("id") == old_ids[n]
                and found[n]["status"] == "online"
                and (agents[n].data_dir / "state.json").exists()
                and agents[n].state()["agent_id"] == old_ids[n]
                for n in pool
            )

        wait_for(rebound, timeout=4 * QUIET, what="every node re-bound")
        moved = time.monotonic() - started
        print(f"every node re-bound onto its old record {moved:.1f} s after the upgrade began")
        assert moved < 2.5 * QUIET, moved  # one window plus the rollout, not N windows
        for name, agent in kubelet.agents().items():
            assert agent.data_dir.resolve() == hosts[pool.index(name)].path(NEW_DIR).resolve()

        # (b) What the operator sees of the 409s: an Event on each refused pod, through the API.
        refused = json.loads(
            cluster_cli.kubectl(
                "get", "events", "-n", namespace,
                "--field-selector", "reason=EnrollmentRefused", "-o", "json",
            ).stdout
        )["items"]  # fmt: skip
        print(
            "$ kubectl get events --field-selector reason=EnrollmentRefused\n"
            + cluster_cli.kubectl(
                "get", "events", "-n", namespace, "--field-selector", "reason=EnrollmentRefused"
            ).stdout
        )  # fmt: skip
        new_pods = {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET)
        }
        by_pod = {e["involvedObject"]["name"]: e for e in refused}
        assert set(by_pod) == set(new_pods), (sorted(by_pod), sorted(new_pods))
        for pod, event in by_pod.items():
            assert event["type"] == "Warning"
            assert event["involvedObject"]["kind"] == "Pod"
            assert event["involvedObject"]["uid"] == new_pods[pod]
            assert event["source"]["component"] == "proxima-agent"
            assert event["message"].startswith("enrollment refused: 409 name_in_use: "), event
            assert "quiet window" in event["message"] and "stays Ready" in event["message"]
        enrolled = cluster_cli.events(namespace, reason="Enrolled")
        rebound_to = {e["involvedObject"]["name"]: e["message"] for e in enrolled}
        for pod in new_pods:
            assert "re-bound to existing agent" in rebound_to.get(pod, ""), rebound_to
        # The Console's side of the same 409s: the clash is in each old record's history.
        for old_id in old_ids.values():
            kinds = [h["kind"] for h in console.agent(old_id)["history"]]
            assert "enrollment_conflict" in kinds and "rebound" in kinds, kinds
        assert sum(a.log().count("enrollment refused: ") for a in kubelet.agents().values())

        # (c) A Console (and NATS) outage: the agents notice, and stay Ready.
        outage = time.monotonic()
        console.stop()
        wait_for(
            lambda: all(a.connectedz()[0] == 503 for a in kubelet.agents().values()),
            timeout=30,
            what="every agent noticed the outage",
        )
        probed = kubelet.probes_run()
        wait_for(
            lambda: all(kubelet.probes_run().get(p, 0) >= n + 5 for p, n in probed.items()),
            timeout=30,
            what="five more readiness probes of every pod",
        )
        pods = ready_pods(cluster_cli, namespace)
        assert len(pods) == NODES and all(pods.values()), pods
        ds = cluster_cli.get("daemonset", DAEMONSET, "-n", namespace)["status"]
        assert ds["numberReady"] == ds["updatedNumberScheduled"] == NODES, ds
        # Not one readiness probe failed since the Console stopped (failureThreshold is 1).
        flips = {
            pod: [(at, ready) for at, ready in changes if at >= outage]
            for pod, changes in kubelet.readiness_changes().items()
        }
        assert all(not changes for changes in flips.values()), flips
        for pod in cluster_cli.pods_of(namespace, "DaemonSet", DAEMONSET):
            assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        assert kubelet.failures == {}
    finally:
        kubelet.stop()
