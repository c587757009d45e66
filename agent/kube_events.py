"""Kubernetes Events on the agent's own Pod, so a refused enrollment is seen with ``kubectl``.

A node agent whose enrollment the Console refuses (a 409 while its old record is still live or
within the quiet window, a bad install token …) stays Ready: readiness means "running and
working" (``agent/health.py``). The refusal is made impossible to miss instead, and one of the
places is the pod itself: a ``Warning`` Event with reason ``EnrollmentRefused`` and the Console's
own words, shown by ``kubectl describe pod`` and ``kubectl get events --field-selector
reason=EnrollmentRefused``; a ``Normal`` ``Enrolled`` Event when it enrolls.

Core ``v1`` Events through the API server with the pod's ServiceAccount token: ``create``, and
``patch`` to count a repeat of the same refusal on the same Event (as the kubelet's recorder
does) instead of adding one per retry. The chart's Role grants exactly those two verbs on
``events`` in the release namespace. Plain HTTPS through the standard library in a worker thread,
like the kubelet client: the node agent never loads the kubernetes client.

Only where the agent knows its pod (``PROXIMA_POD_NAME``, ``PROXIMA_POD_NAMESPACE`` or the
ServiceAccount's ``namespace``, ``PROXIMA_POD_UID``; the chart sets them) and runs in a cluster
(``KUBERNETES_SERVICE_HOST``/``_PORT``); elsewhere there is nothing to record on. A failure to
record is logged once (with the fix) and never holds enrollment up.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from agent.problems import ProblemLog

if TYPE_CHECKING:
    from agent.settings import AgentSettings

__all__ = ["EVENT_PERMISSIONS", "EventReason", "EventsConfig", "PodEvents", "events_config"]

log = logging.getLogger(__name__)

COMPONENT = "proxima-agent"
# (apiGroup, resource, verb) of every call below; the chart's events Role grants exactly these.
EVENT_PERMISSIONS = frozenset({("", "events", "create"), ("", "events", "patch")})
_MESSAGE_LIMIT = 1024  # events.k8s.io's bound on a note; kept for core events too
_RBAC_FIX = (
    "the agent's ServiceAccount needs create and patch on events in its namespace "
    "(the chart's <release>-events Role; with rbac.create=false grant it yourself)"
)


class EventReason(StrEnum):
    ENROLLMENT_REFUSED = "EnrollmentRefused"
    ENROLLED = "Enrolled"


@dataclass(frozen=True)
class EventsConfig:
    api_url: str  # https://<host>:<port>
    token_file: Path
    ca_file: Path
    pod_name: str
    namespace: str
    pod_uid: str | None = None
    node_name: str | None = None
    timeout: float = 5.0


def events_config(
    settings: AgentSettings, env: dict[str, str] | None = None
) -> EventsConfig | None:
    """The pod to record on, or ``None`` outside a pod the chart deployed."""
    environ = os.environ if env is None else env
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = environ.get("KUBERNETES_SERVICE_PORT", "").strip()
    if not (settings.pod_name and host and port):
        return None
    sa = settings.service_account_dir
    namespace = settings.pod_namespace
    if namespace is None:
        try:
            namespace = (sa / "namespace").read_text(encoding="utf-8").strip() or None
        except OSError:
            namespace = None
    if namespace is None:
        return None
    host = f"[{host}]" if ":" in host else host
    return EventsConfig(
        api_url=f"https://{host}:{port}",
        token_file=sa / "token",
        ca_file=sa / "ca.crt",
        pod_name=settings.pod_name,
        namespace=namespace,
        pod_uid=settings.pod_uid,
        node_name=settings.agent_name if settings.agent_type == "k8s-node-monitor" else None,
    )


# (method, path, headers, body) -> (status, body)
EventsTransport = Callable[[str, str, dict[str, str], bytes], tuple[int, bytes]]


class _HttpTransport:
    def __init__(self, config: EventsConfig) -> None:
        self.config = config
        self._context: ssl.SSLContext | None = None

    def __call__(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes]:
        if self._context is None:
            cafile = str(self.config.ca_file) if self.config.ca_file.is_file() else None
            self._context = ssl.create_default_context(cafile=cafile)
        host, _, port = self.config.api_url.removeprefix("https://").rpartition(":")
        connection = http.client.HTTPSConnection(
            host.strip("[]"), int(port), timeout=self.config.timeout, context=self._context
        )
        try:
            connection.request(method, path, body=body, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.read(64 * 1024)
        finally:
            connection.close()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodEvents:
    """Records Events on one pod. ``key`` groups repeats: the same key patches the Event it
    made (count, last time, latest message) instead of creating another."""

    def __init__(self, config: EventsConfig, transport: EventsTransport | None = None) -> None:
        self.config = config
        self._transport = transport or _HttpTransport(config)
        self._made: dict[str, tuple[str, int]] = {}  # key -> (event name, count)
        self._problems = ProblemLog(log)

    async def record(self, type_: str, reason: EventReason, message: str, key: str) -> None:
        try:
            await asyncio.to_thread(self._record, type_, reason, message[:_MESSAGE_LIMIT], key)
        except Exception as e:  # never let an event hold enrollment up
            self._problems.failed(
                f"error {type(e).__name__}",
                "cannot record event %s on pod %s/%s: %s",
                reason,
                self.config.namespace,
                self.config.pod_name,
                e,
            )

    def _record(self, type_: str, reason: EventReason, message: str, key: str) -> None:
        made = self._made.get(key)
        if made is not None:
            name, count = made
            status, body = self._call(
                "PATCH",
                f"{self._events_path()}/{quote(name)}",
                {"count": count + 1, "lastTimestamp": _now(), "message": message},
                "application/merge-patch+json",
            )
            if status < 300:
                self._made[key] = (name, count + 1)
                self._problems.recovered("recording events on pod %s again", self.config.pod_name)
                return
            if status != 404:  # gone (the API server's event TTL): make it anew
                self._refused(reason, status, body)
                return
        name = f"{self.config.pod_name}.{time.time_ns():x}"
        status, body = self._call(
            "POST", self._events_path(), self._event(name, type_, reason, message)
        )
        if status < 300:
            self._made[key] = (name, 1)
            self._problems.recovered("recording events on pod %s again", self.config.pod_name)
            log.debug("recorded event %s %s on pod %s", type_, reason, self.config.pod_name)
        else:
            self._refused(reason, status, body)

    def _refused(self, reason: EventReason, status: int, body: bytes) -> None:
        try:
            text = str(json.loads(body).get("message") or "")
        except (ValueError, AttributeError):
            text = body[:200].decode(errors="replace")
        fix = f": {_RBAC_FIX}" if status in (401, 403) else ""
        self._problems.failed(
            f"http {status}",
            "cannot record event %s on pod %s/%s: the API server answered %d (%s)%s",
            reason,
            self.config.namespace,
            self.config.pod_name,
            status,
            text,
            fix,
        )

    def _events_path(self) -> str:
        return f"/api/v1/namespaces/{quote(self.config.namespace)}/events"

    def _event(self, name: str, type_: str, reason: EventReason, message: str) -> dict[str, Any]:
        cfg = self.config
        now = _now()
        involved: dict[str, str] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": cfg.pod_name,
            "namespace": cfg.namespace,
        }
        if cfg.pod_uid:
            involved["uid"] = cfg.pod_uid
        source = {"component": COMPONENT}
        if cfg.node_name:
            source["host"] = cfg.node_name
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": cfg.namespace},
            "involvedObject": involved,
            "reason": str(reason),
            "message": message,
            "type": type_,
            "source": source,
            "reportingComponent": COMPONENT,
            "reportingInstance": cfg.pod_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    def _call(
        self,
        method: str,
        path: str,
        payload: dict[str, Any],
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        try:
            token = self.config.token_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise OSError(f"no ServiceAccount token at {self.config.token_file}: {e}") from None
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": content_type,
            "Accept": "application/json",
            "User-Agent": COMPONENT,
        }
        return self._transport(method, path, headers, json.dumps(payload).encode())
