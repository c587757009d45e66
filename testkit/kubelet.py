"""A kubelet double for the ``tests/cluster`` lane: it runs the chart's pods as real agents.

kwok plays the kubelet of the lane's nodes towards the API server (node status, leases, pod
status), but runs no container. :class:`KubeletDouble` stands in for the part kwok leaves out:
it watches the real pods that the scheduler and the DaemonSet/StatefulSet controllers bind to
the nodes it serves and, for each one whose container is the agent (``proxima-agent run``),
starts a real agent process (:class:`testkit.agents.AgentProcess`) configured **from that pod**:

- its ``env``: literal values, ``fieldRef`` (``spec.nodeName``, ``status.hostIP``,
  ``metadata.*``), ``secretKeyRef`` / ``configMapKeyRef`` read from the API, ``$(VAR)``
  expansion, plus the ``KUBERNETES_SERVICE_HOST``/``_PORT`` every pod gets (here the API
  server's loopback address);
- its volumes, laid out as a directory of symlinks (the pod's "root"): a ``hostPath`` is that
  path under the node's fake root (:class:`FakeHost`; ``type`` is checked as the kubelet checks
  it: a missing ``File``/``Directory`` fails the pod), a claim its bound PersistentVolume's
  host path, a ``secret``/``configMap`` the object's keys written out, ``emptyDir`` an empty
  directory, and the ServiceAccount volume a token from the TokenRequest API **bound to the
  pod** (it dies with the pod, as the kubelet's does) with the cluster's CA and namespace;
- every env value that is an absolute path inside those mounts is rewritten into the pod's
  root (``PROXIMA_DATA_DIR``, ``PROXIMA_HOST_ROOT`` …), and the ServiceAccount directory is
  passed as ``PROXIMA_SERVICE_ACCOUNT_DIR``.

A pod being deleted (``deletionTimestamp``, or gone) has its agent stopped with SIGTERM; an agent
that exits is restarted with the kubelet's back-off (10 s doubling to 5 min: restartPolicy
Always). Events of each node are handled in order on that node's own thread (the old pod stops
before the node's next pod starts); nodes run side by side.

Probes and pod status: a pod annotated ``proxima.test/kubelet-double``
(:data:`testkit.cluster.PROBED_ANNOTATION`) is left alone by kwok's "pod-ready" stage, and the
double reports its status as the kubelet would: ``Running``, ``Ready`` from the container's
``readinessProbe`` run against the agent's health server, a failing ``livenessProbe`` restarts
the agent (``testkit/probes.py``). Such a rollout is paced by the agent's readiness. Other pods'
status is kwok's: Ready at once, whatever the agent does.

What it does not do (so what the lane does not prove): no container image, no mount or network
namespace (the agent runs from this tree; its health server listens on a free loopback port, not
the pod's ``healthPort``, and probes go there; ``readOnly`` is not enforced; symlinks stand in
for mounts); no resource limits, no eviction, no image pulls.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testkit.agents import AgentProcess
from testkit.cluster import PROBED_ANNOTATION, KubeCluster
from testkit.pods import REQUEST_TIMEOUT, FakeHost, PodSandbox, PodStartError
from testkit.probes import ProbedContainer

log = logging.getLogger(__name__)

AGENT_COMMAND = ["proxima-agent", "run"]
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0
RETRY_SECONDS = 1.0
"""After an API call failed while setting a pod up (a timeout, a 5xx): when to try it again."""


@dataclass(frozen=True)
class PodEvent:
    """One pod change the double saw (for judging a rollout afterwards)."""

    at: float
    node: str
    pod: str
    uid: str
    alive: bool
    """Bound to the node, not being deleted."""
    ready: bool
    revision: str
    """The pod's ``controller-revision-hash`` label."""


@dataclass
class RunningPod:
    uid: str
    name: str
    namespace: str
    agent: AgentProcess
    restarts: int = 0
    next_restart: float | None = None
    probed: ProbedContainer | None = None
    """Set when this double reports the pod's status (:data:`PROBED_ANNOTATION`)."""


@dataclass
class _Node:
    host: FakeHost
    queue: queue.Queue[dict[str, Any] | None] = field(default_factory=queue.Queue)
    pods: dict[str, RunningPod] = field(default_factory=dict)
    thread: threading.Thread | None = None
    retry: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    """Pod uid -> (when, the pod): set-ups that failed on the API, to try again."""


class KubeletDouble:
    """See the module docstring. ``hosts`` are the nodes served (by node name); ``namespace``
    limits the pods watched; ``env`` is laid over every agent's environment (test tuning)."""

    def __init__(
        self,
        cluster: KubeCluster,
        hosts: Iterable[FakeHost],
        workdir: Path,
        *,
        namespace: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.namespace = namespace
        self.env = dict(env or {})
        self.nodes = {h.name: _Node(h) for h in hosts}
        self.events: list[PodEvent] = []
        self.failures: dict[str, str] = {}
        """Pod name → why it could not start."""
        self.started: list[str] = []
        """``namespace/pod`` of every agent started, in order."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._api = cluster.api_client(pool=4 + 2 * len(self.nodes))
        self.sandbox = PodSandbox(self._api, cluster.api_port, workdir, self.env)
        self._watcher = threading.Thread(target=self._watch, name="kubelet-watch", daemon=True)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> KubeletDouble:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name, node in self.nodes.items():
            node.thread = threading.Thread(
                target=self._serve, args=(node,), name=f"kubelet-{name}", daemon=True
            )
            node.thread.start()
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._watcher.join(timeout=15)
        for node in self.nodes.values():
            node.queue.put(None)
        for node in self.nodes.values():
            if node.thread is not None:
                node.thread.join(timeout=60)
        for node in self.nodes.values():
            for pod in node.pods.values():
                pod.agent.stop()
        self._api.close()

    def __enter__(self) -> KubeletDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- reads for the test -----------------------------------------------------------------

    def agents(self) -> dict[str, AgentProcess]:
        """The agent of each node's newest running pod, by node name."""
        with self._lock:
            return {
                name: list(node.pods.values())[-1].agent
                for name, node in self.nodes.items()
                if node.pods
            }

    def pod_agents(self) -> dict[str, AgentProcess]:
        """Every running pod's agent, by pod name."""
        with self._lock:
            return {p.name: p.agent for node in self.nodes.values() for p in node.pods.values()}

    def pod_events(self) -> list[PodEvent]:
        with self._lock:
            return list(self.events)

    def readiness_changes(self) -> dict[str, list[tuple[float, bool]]]:
        """Each probed pod's readiness as reported, ``(monotonic time, ready)`` per change."""
        with self._lock:
            return {
                p.name: list(p.probed.history)
                for node in self.nodes.values()
                for p in node.pods.values()
                if p.probed is not None
            }

    def probes_run(self) -> dict[str, int]:
        """Readiness probes run so far, by pod name (pods whose status this double reports)."""
        with self._lock:
            return {
                p.name: p.probed.readiness.count
                for node in self.nodes.values()
                for p in node.pods.values()
                if p.probed is not None and p.probed.readiness is not None
            }

    # -- the watch --------------------------------------------------------------------------

    def _watch(self) -> None:
        import kubernetes.client as k8s
        from kubernetes import watch as watching

        watch: Any = watching
        from kubernetes.client.exceptions import ApiException

        core: Any = k8s.CoreV1Api(self._api)
        version = ""
        while not self._stopping.is_set():
            stream = watch.Watch()
            try:
                if not version:
                    listing = self._list(core)
                    version = listing.metadata.resource_version
                    for pod in listing.items:
                        self._route("ADDED", self._api.sanitize_for_serialization(pod))
                for event in stream.stream(
                    self._list_function(core),
                    resource_version=version,
                    timeout_seconds=2,
                    allow_watch_bookmarks=True,
                    _request_timeout=REQUEST_TIMEOUT,
                ):
                    raw = event["raw_object"]
                    version = raw["metadata"].get("resourceVersion") or version
                    if event["type"] != "BOOKMARK":
                        self._route(event["type"], raw)
                    if self._stopping.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:  # expired: list again
                    version = ""
                else:
                    log.warning("kubelet double: watch failed: %s", exc)
                    time.sleep(0.5)
            except Exception as exc:  # a dropped connection: watch again
                log.warning("kubelet double: watch error: %s", exc)
                time.sleep(0.2)
            finally:
                stream.stop()

    def _list_function(self, core: Any) -> Any:
        """The pod list call (a plain function: the watch then yields raw dicts)."""
        if self.namespace:
            return lambda **kw: core.list_namespaced_pod(self.namespace, **kw)
        return lambda **kw: core.list_pod_for_all_namespaces(**kw)

    def _list(self, core: Any) -> Any:
        return self._list_function(core)()

    def _route(self, kind: str, pod: dict[str, Any]) -> None:
        node = self.nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        if node is None:
            return
        meta = pod["metadata"]
        alive = kind != "DELETED" and not meta.get("deletionTimestamp")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
        with self._lock:
            self.events.append(
                PodEvent(
                    at=time.monotonic(),
                    node=node.host.name,
                    pod=meta["name"],
                    uid=meta["uid"],
                    alive=alive,
                    ready=alive and ready,
                    revision=(meta.get("labels") or {}).get("controller-revision-hash", ""),
                )
            )
        node.queue.put({"alive": alive, "pod": pod})

    # -- one node's pods --------------------------------------------------------------------

    def _serve(self, node: _Node) -> None:
        while True:
            try:
                item = node.queue.get(timeout=0.5)
            except queue.Empty:
                item = {}
            if item is None:
                return
            if item:
                pod = item["pod"]
                if item["alive"]:
                    self._ensure_running(node, pod)
                else:
                    node.retry.pop(pod["metadata"]["uid"], None)
                    self._stop_pod(node, pod["metadata"]["uid"])
            now = time.monotonic()
            for uid, (when, pod) in list(node.retry.items()):
                if now >= when:
                    del node.retry[uid]
                    self._ensure_running(node, pod)
            self._restart_exited(node)
            self._probe(node)

    def _ensure_running(self, node: _Node, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta["uid"] in node.pods or meta["name"] in self.failures:
            return
        containers = pod["spec"].get("containers") or []
        if len(containers) != 1 or containers[0].get("command") != AGENT_COMMAND:
            return  # not the agent's pod: nothing this double can run
        try:
            agent = self.sandbox.agent_for(node.host, pod, containers[0])
        except PodStartError as exc:
            with self._lock:
                self.failures[meta["name"]] = str(exc)
            log.warning("kubelet double: %s/%s cannot start: %s", node.host.name, meta["name"], exc)
            return
        except Exception as exc:  # the API failed (a timeout, a 5xx): as the kubelet, try again
            node.retry[meta["uid"]] = (time.monotonic() + RETRY_SECONDS, pod)
            log.warning("kubelet double: %s/%s set-up: %s", node.host.name, meta["name"], exc)
            return
        running = RunningPod(meta["uid"], meta["name"], meta["namespace"], agent.start())
        if PROBED_ANNOTATION in (meta.get("annotations") or {}):
            running.probed = ProbedContainer.of(containers[0])
            running.probed.started(time.monotonic())
        with self._lock:
            node.pods[meta["uid"]] = running
            self.started.append(f"{meta['namespace']}/{meta['name']}")

    def _stop_pod(self, node: _Node, uid: str) -> None:
        with self._lock:
            running = node.pods.pop(uid, None)
        if running is not None:
            running.agent.stop()

    def _restart_exited(self, node: _Node) -> None:
        now = time.monotonic()
        for running in list(node.pods.values()):
            if running.agent.alive:
                continue
            if running.next_restart is None:
                delay = min(BACKOFF_FIRST * 2**running.restarts, BACKOFF_MAX)
                running.next_restart = now + delay
            elif now >= running.next_restart:
                running.restarts += 1
                running.next_restart = None
                running.agent.start()
                if running.probed is not None:
                    running.probed.restarts = running.restarts
                    running.probed.started(now)

    def _probe(self, node: _Node) -> None:
        """The kubelet's probes for the pods whose status this double reports."""
        now = time.monotonic()
        for running in list(node.pods.values()):
            probed = running.probed
            if probed is None:
                continue
            changed, restart = probed.step(running.agent, now)
            if restart:  # liveness failed its threshold: restart the container
                log.warning("kubelet double: %s failed liveness: restarting", running.name)
                running.agent.stop()
                running.restarts += 1
                probed.restarts = running.restarts
                running.agent.start()
                probed.started(now)
                changed = True
            if changed:
                self._report(node, running)

    def _report(self, node: _Node, running: RunningPod) -> None:
        import kubernetes.client as k8s
        from kubernetes.client.exceptions import ApiException

        assert running.probed is not None
        body = running.probed.status("127.0.0.2", running.agent.alive)  # kwok's --node-ip
        try:
            core: Any = k8s.CoreV1Api(self._api)
            core.patch_namespaced_pod_status(
                running.name, running.namespace, body, _request_timeout=REQUEST_TIMEOUT
            )
            running.probed.reported = True
        except Exception as exc:  # not reported, so the next probe reports again
            if not (isinstance(exc, ApiException) and exc.status == 404):  # 404: the pod is gone
                log.warning("kubelet double: status of %s: %s", running.name, exc)


# -- helpers ------------------------------------------------------------------------------


def unavailable_peak(
    events: Iterable[PodEvent], nodes: Iterable[str], since: float = 0.0
) -> tuple[int, int]:
    """From the pod events (in order): the most nodes at once without a Ready pod, and the most
    live pods at once on one node, after ``since``."""
    alive: dict[str, dict[str, bool]] = {n: {} for n in nodes}
    worst_down = worst_crowd = 0
    for event in events:
        if event.node not in alive:
            continue
        pods = alive[event.node]
        if event.alive:
            pods[event.uid] = event.ready
        else:
            pods.pop(event.uid, None)
        if event.at < since:
            continue
        down = sum(1 for p in alive.values() if not any(p.values()))
        worst_down = max(worst_down, down)
        worst_crowd = max(worst_crowd, max((len(p) for p in alive.values()), default=0))
    return worst_down, worst_crowd
