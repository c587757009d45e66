"""The kubelet's probes and pod status, for :class:`testkit.kubelet.KubeletDouble`.

A pod annotated :data:`testkit.cluster.PROBED_ANNOTATION` is skipped by kwok's "pod-ready" stage;
the double then plays that part of the kubelet too: it reports the pod ``Running`` with
``Ready``/``ContainersReady`` from the container's ``readinessProbe`` (``httpGet`` on the
agent's health server; the probe's port is the agent's real loopback port, whatever the pod
says), honouring ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``,
``successThreshold`` and ``failureThreshold``; a ``livenessProbe`` that fails its threshold
restarts the agent (``restartCount`` + 1), as the kubelet restarts the container. Rollouts are
then paced by the agent's own readiness, as on a real cluster.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from testkit.agents import AgentProcess


@dataclass
class Probe:
    path: str
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int
    successes: int = 0
    failures: int = 0
    next_at: float = 0.0
    count: int = 0
    """Probes run so far."""

    @classmethod
    def of(cls, spec: dict[str, Any] | None) -> Probe | None:
        if not spec or "httpGet" not in spec:
            return None
        return cls(
            path=spec["httpGet"].get("path") or "/",
            initial_delay=float(spec.get("initialDelaySeconds", 0)),
            period=float(spec.get("periodSeconds", 10)),
            timeout=float(spec.get("timeoutSeconds", 1)),
            success_threshold=int(spec.get("successThreshold", 1)),
            failure_threshold=int(spec.get("failureThreshold", 3)),
        )

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def run(self, agent: AgentProcess, now: float) -> bool:
        """Probe once; True when the answer was 2xx/3xx (the kubelet's rule)."""
        self.next_at = now + self.period
        self.count += 1
        ok = _http_ok(agent, self.path, self.timeout)
        if ok:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1
        return ok


@dataclass
class ProbedContainer:
    """Probe state of one pod's container; ``ready`` is what was last reported."""

    name: str
    image: str
    readiness: Probe | None
    liveness: Probe | None
    started_at: str = ""
    ready: bool = False
    reported: bool = False
    restarts: int = 0
    history: list[tuple[float, bool]] = field(default_factory=list)

    @classmethod
    def of(cls, container: dict[str, Any]) -> ProbedContainer:
        return cls(
            name=container["name"],
            image=container.get("image") or "",
            readiness=Probe.of(container.get("readinessProbe")),
            liveness=Probe.of(container.get("livenessProbe")),
        )

    def started(self, now: float) -> None:
        """The container (re)started: probes begin after their initial delays, not ready."""
        self.started_at = _now()
        self.ready = False
        self.reported = False
        for probe in (self.readiness, self.liveness):
            if probe is not None:
                probe.successes = probe.failures = 0
                probe.next_at = now + probe.initial_delay

    def step(self, agent: AgentProcess, now: float) -> tuple[bool, bool]:
        """Run the probes that are due: (readiness changed or never reported, restart needed)."""
        restart = False
        if not agent.alive:
            changed = self.ready or not self.reported
            self.ready = False
            return changed, False
        if self.liveness is not None and self.liveness.due(now):
            self.liveness.run(agent, now)
            restart = self.liveness.failures >= self.liveness.failure_threshold
        ready = self.ready
        if self.readiness is None:
            ready = True
        elif self.readiness.due(now):
            self.readiness.run(agent, now)
            if self.readiness.successes >= self.readiness.success_threshold:
                ready = True
            elif self.readiness.failures >= self.readiness.failure_threshold:
                ready = False
        changed = ready != self.ready or not self.reported
        self.ready = ready
        if changed:
            self.history.append((now, ready))
        return changed, restart

    def status(self, host_ip: str, running: bool) -> dict[str, Any]:
        """The pod status patch for what was last probed."""
        now = _now()
        ready = "True" if self.ready else "False"
        state: dict[str, Any] = (
            {"running": {"startedAt": self.started_at}}
            if running
            else {"waiting": {"reason": "CrashLoopBackOff"}}
        )
        return {
            "status": {
                "phase": "Running",
                "hostIP": host_ip,
                "hostIPs": [{"ip": host_ip}],
                "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": self.started_at,
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready, "lastTransitionTime": now},
                ],
                "containerStatuses": [
                    {
                        "name": self.name,
                        "image": self.image,
                        "imageID": "",
                        "ready": self.ready,
                        "started": running,
                        "restartCount": self.restarts,
                        "state": state,
                    }
                ],
            }
        }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _http_ok(agent: AgentProcess, path: str, timeout: float) -> bool:
    try:
        port = int((agent.data_dir / "health.port").read_text())
    except (OSError, ValueError):
        return False
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        return 200 <= conn.getresponse().status < 400
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def monotonic() -> float:
    return time.monotonic()
