"""Kubelet metrics: ``GET {PROXIMA_KUBELET_URL}/stats/summary`` with the pod's ServiceAccount token.

Plain HTTPS through the standard library, called from a worker thread: the node agent stays
light (no kubernetes client, no httpx). The kubelet's serving certificate is verified against
the cluster CA (the ServiceAccount's ``ca.crt``) unless the operator opted out with
``PROXIMA_KUBELET_INSECURE_SKIP_VERIFY`` (kubelets with self-signed serving certificates). The
token is read again on every call: projected ServiceAccount tokens rotate.

Errors are one exception, :class:`KubeletError`, whose :class:`KubeletProblem` says what went
wrong and whose ``fix`` is what the operator should do (the chart's Common Issues table).
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "KubeletClient",
    "KubeletConfig",
    "KubeletError",
    "KubeletProblem",
    "KubeletTransport",
    "summarize",
]

SUMMARY_PATH = "/stats/summary"
_MAX_ANSWER = 32 * 1024 * 1024
_MAX_PODS = 250  # per-pod usage kept in a metrics message (kubelet maxPods is 110 by default)

# The chart page's Common Issues row "Kubelet metrics not flowing".
RBAC_FIX = (
    "Set hostMetrics: true, check ClusterRole: the node agent's ClusterRole must grant get on "
    "nodes/stats to its ServiceAccount"
)


class KubeletProblem(StrEnum):
    UNAUTHORIZED = "unauthorized"  # 401: token refused
    FORBIDDEN = "forbidden"  # 403: token accepted, RBAC says no
    REFUSED = "connection refused"
    UNTRUSTED = "certificate not trusted"
    UNREACHABLE = "unreachable"  # DNS, timeout, reset
    NO_TOKEN = "no token"  # noqa: S105 (a problem name, not a secret)
    BAD_ANSWER = "bad answer"  # another status, or not the JSON of a summary


_FIXES = {
    KubeletProblem.UNAUTHORIZED: RBAC_FIX + " (the kubelet refused the token: it needs "
    "webhook authentication, --authentication-token-webhook)",
    KubeletProblem.FORBIDDEN: RBAC_FIX,
    KubeletProblem.REFUSED: "verify nodeAgent.kubelet.url / nodeAgent.kubelet.port (the kubelet "
    "listens on 10250) and network policies; " + RBAC_FIX,
    KubeletProblem.UNTRUSTED: "kubelets with self-signed serving certificates need "
    "nodeAgent.kubelet.insecureSkipVerify=true (PROXIMA_KUBELET_INSECURE_SKIP_VERIFY)",
    KubeletProblem.UNREACHABLE: "verify nodeAgent.kubelet.url and network policies",
    KubeletProblem.NO_TOKEN: "the pod needs its ServiceAccount token mounted "
    "(automountServiceAccountToken: true, as the chart sets it)",
    KubeletProblem.BAD_ANSWER: "check that nodeAgent.kubelet.url points at the kubelet",
}


class KubeletError(Exception):
    """No usable summary from the kubelet. ``key`` tells failures apart for logging once."""

    def __init__(
        self, url: str, problem: KubeletProblem, detail: str, status: int | None = None
    ) -> None:
        super().__init__(f"{url}: {detail}")
        self.url = url
        self.problem = problem
        self.detail = detail
        self.status = status

    @property
    def fix(self) -> str:
        return _FIXES[self.problem]

    @property
    def key(self) -> str:
        return f"{self.problem} {self.status}" if self.status else str(self.problem)


@dataclass(frozen=True)
class KubeletConfig:
    url: str  # https://10.0.0.7:10250, no trailing slash
    token_file: Path
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    timeout: float = 10.0


# (url, headers) -> (status, reason, body); raises OSError / ssl.SSLError like http.client.
KubeletTransport = Callable[[str, dict[str, str]], tuple[int, str, bytes]]


class _HttpTransport:
    """One short-lived connection per call: a call a minute does not need keep-alive."""

    def __init__(self, config: KubeletConfig) -> None:
        self.config = config
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        if self._context is None:
            if self.config.insecure_skip_verify:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif self.config.ca_file is not None and self.config.ca_file.is_file():
                context = ssl.create_default_context(cafile=str(self.config.ca_file))
            else:
                context = ssl.create_default_context()
            self._context = context
        return self._context

    def __call__(self, url: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        parts = urlsplit(url)
        host = parts.hostname or ""
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                host, parts.port or 443, timeout=self.config.timeout, context=self.context()
            )
        else:
            connection = http.client.HTTPConnection(
                host, parts.port or 80, timeout=self.config.timeout
            )
        try:
            connection.request("GET", path, headers=headers)
            answer = connection.getresponse()
            body = answer.read(_MAX_ANSWER + 1)
            return answer.status, answer.reason, body
        finally:
            connection.close()


class KubeletClient:
    """Reads the kubelet's summary API. Blocking: call it through ``asyncio.to_thread``."""

    def __init__(self, config: KubeletConfig, transport: KubeletTransport | None = None) -> None:
        if not config.url.startswith(("https://", "http://")):
            raise ValueError(f"kubelet URL must be http(s)://, got {config.url!r}")
        self.config = config
        self.url = config.url.rstrip("/") + SUMMARY_PATH
        self._transport = transport or _HttpTransport(config)

    def _token(self) -> str:
        path = self.config.token_file
        try:
            token = path.read_text().strip()
        except OSError as e:
            raise KubeletError(
                self.url,
                KubeletProblem.NO_TOKEN,
                f"cannot read the ServiceAccount token {path}: {e.strerror or e}",
            ) from None
        if not token:
            raise KubeletError(self.url, KubeletProblem.NO_TOKEN, f"token file {path} is empty")
        return token

    def summary(self) -> dict[str, Any]:
        """The kubelet's ``/stats/summary`` document, parsed."""
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        try:
            status, reason, body = self._transport(self.url, headers)
        except ssl.SSLCertVerificationError as e:
            detail = e.verify_message or str(e)
            raise KubeletError(
                self.url, KubeletProblem.UNTRUSTED, f"serving certificate not trusted ({detail})"
            ) from None
        except ConnectionRefusedError:
            raise KubeletError(self.url, KubeletProblem.REFUSED, "connection refused") from None
        except TimeoutError:
            raise KubeletError(self.url, KubeletProblem.UNREACHABLE, "timed out") from None
        except (OSError, http.client.HTTPException) as e:
            detail = getattr(e, "strerror", None) or str(e) or e.__class__.__name__
            raise KubeletError(self.url, KubeletProblem.UNREACHABLE, detail) from None
        if status == 401:
            raise KubeletError(self.url, KubeletProblem.UNAUTHORIZED, "401 Unauthorized", 401)
        if status == 403:
            message = _status_message(body)
            raise KubeletError(
                self.url,
                KubeletProblem.FORBIDDEN,
                "403 Forbidden" + (f" ({message})" if message else ""),
                403,
            )
        if status != 200:
            raise KubeletError(
                self.url, KubeletProblem.BAD_ANSWER, f"answered {status} {reason}".strip(), status
            )
        if len(body) > _MAX_ANSWER:
            raise KubeletError(self.url, KubeletProblem.BAD_ANSWER, "summary larger than 32 MiB")
        try:
            document = json.loads(body)
        except ValueError:
            raise KubeletError(self.url, KubeletProblem.BAD_ANSWER, "answer is not JSON") from None
        if not isinstance(document, dict) or not isinstance(document.get("node"), dict):
            raise KubeletError(self.url, KubeletProblem.BAD_ANSWER, "answer is not a stats summary")
        return document


def _status_message(body: bytes) -> str:
    text = body[:2000].decode(errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text.splitlines()[0][:300] if text else ""
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])[:300]
    return ""


def _int(section: Any, key: str) -> int | None:
    if isinstance(section, dict):
        value = section.get(key)
        if isinstance(value, int | float):
            return int(value)
    return None


def summarize(document: dict[str, Any]) -> dict[str, Any]:
    """What a metrics message keeps of a ``/stats/summary``: node totals, and per pod CPU and
    memory (at most 250 pods), not every container, volume and interface."""
    node = document.get("node") or {}
    cpu, memory, fs = node.get("cpu"), node.get("memory"), node.get("fs")
    runtime = node.get("runtime") or {}
    image_fs = runtime.get("imageFs") if isinstance(runtime, dict) else None
    rx = tx = 0
    network = node.get("network") or {}
    for interface in network.get("interfaces") or []:
        rx += _int(interface, "rxBytes") or 0
        tx += _int(interface, "txBytes") or 0
    pods = document.get("pods") or []
    usage: list[dict[str, Any]] = []
    containers = 0
    for pod in pods:
        ref = pod.get("podRef") or {}
        containers += len(pod.get("containers") or [])
        if len(usage) < _MAX_PODS:
            usage.append(
                {
                    "namespace": ref.get("namespace"),
                    "name": ref.get("name"),
                    "cpu_nanocores": _int(pod.get("cpu"), "usageNanoCores"),
                    "memory_working_set_bytes": _int(pod.get("memory"), "workingSetBytes"),
                }
            )
    return {
        "node_name": node.get("nodeName"),
        "cpu_usage_nanocores": _int(cpu, "usageNanoCores"),
        "memory_working_set_bytes": _int(memory, "workingSetBytes"),
        "memory_available_bytes": _int(memory, "availableBytes"),
        "fs_capacity_bytes": _int(fs, "capacityBytes"),
        "fs_used_bytes": _int(fs, "usedBytes"),
        "imagefs_capacity_bytes": _int(image_fs, "capacityBytes"),
        "imagefs_used_bytes": _int(image_fs, "usedBytes"),
        "network_rx_bytes": rx,
        "network_tx_bytes": tx,
        "pods": len(pods),
        "containers": containers,
        "pod_usage": usage,
        "pod_usage_truncated": len(pods) > _MAX_PODS,
    }
