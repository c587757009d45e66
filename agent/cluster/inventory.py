"""One relist of the cluster: every kind in :data:`agent.cluster.kinds.KINDS`, paginated.

Blocking (the official client is synchronous): the collector runs :meth:`InventoryReader.read`
in a worker thread. Lists are read as raw JSON (``_preload_content=False``) and summarized page
by page: building the client's models for 5,000 pods costs time and memory for fields we drop.

What a failure does:

- the API server unreachable, 401, 5xx or 429 → :class:`KubernetesUnavailableError`: the whole
  sync is abandoned (a partial snapshot would make the Console drop objects it still has);
- 403 on a kind → that kind is left out, the snapshot's ``errors`` says why and its
  ``problems`` says it as a fact (``forbidden_argo_rollouts``: a chart older than Argo Rollouts
  support; ``forbidden`` for another kind), the rest flows;
- another refusal of a kind (say 400) → the same, as ``unreadable``;
- 404 on Argo Rollouts → the CRD is not installed: zero rollouts, not an error;
- 410 on a ``continue`` token → that kind is listed again from the start, once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from agent.cluster.kinds import KINDS, ROLLOUTS, Kind
from contracts.inventory import InventoryProblem, InventorySnapshot
from contracts.vocabulary.inventory import InventoryProblemKind

__all__ = [
    "InventoryConfig",
    "InventoryReader",
    "KubernetesUnavailableError",
    "Reading",
    "forbidden_message",
    "inventory_problem",
]

log = logging.getLogger(__name__)

PAGE_SIZE = 500
ROLLOUTS_FORBIDDEN = "forbidden to read argo rollouts"


class KubernetesUnavailableError(Exception):
    """The API server could not serve the sync at all: down, refusing the token, failing."""

    def __init__(self, server: str, detail: str, status: int | None = None) -> None:
        super().__init__(f"{server}: {detail}")
        self.server = server
        self.detail = detail
        self.status = status

    @property
    def key(self) -> str:
        return f"http {self.status}" if self.status else self.detail


@dataclass(frozen=True)
class InventoryConfig:
    cluster_name: str
    cluster_slug: str
    sync_interval: float
    pod_limit: int
    exclude_namespaces: frozenset[str] = frozenset()


@dataclass
class Reading:
    """A snapshot and how it went: ``problems`` maps a kind to why it is missing."""

    snapshot: InventorySnapshot
    problems: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    seconds: float = 0.0


def forbidden_message(kind: Kind) -> str:
    """The line in the snapshot's errors (the Console shows it as a warning) for a 403."""
    if kind is ROLLOUTS:
        return (
            f"{ROLLOUTS_FORBIDDEN}: the ClusterRole has no argoproj.io rollouts rule (a chart "
            "older than Argo Rollouts support): helm upgrade to the current chart"
        )
    return (
        f"forbidden to read {kind.plural} ({kind.api_version}): the cluster agent's ClusterRole "
        f"does not grant list on {kind.plural}: helm upgrade to the current chart, or grant it "
        "where rbac.create=false"
    )


_MESSAGE_LIMIT = 4096  # InventoryProblem.message's


def inventory_problem(kind: Kind, status: int | None, answer: str) -> InventoryProblem:
    """Why ``kind`` is missing from the snapshot, as a fact; its ``message`` is the line of the
    snapshot's ``errors``. ``answer`` is what :attr:`Reading.problems` holds for it."""
    if status == 403:
        fact = (
            InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS
            if kind is ROLLOUTS
            else InventoryProblemKind.FORBIDDEN
        )
        message = forbidden_message(kind)
    else:
        fact = InventoryProblemKind.UNREADABLE
        message = f"cannot read {kind.plural} ({kind.api_version}): {answer}"
    return InventoryProblem(kind=fact, resource=kind.plural, message=message[:_MESSAGE_LIMIT])


def _status_message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or b"{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or error.reason or f"HTTP {error.status}")


_Lister = Callable[..., Any]


def _listers(api: client.ApiClient) -> dict[str, _Lister]:
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)

    def rollouts(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(
            ROLLOUTS.group, ROLLOUTS.version, ROLLOUTS.plural, **kwargs
        )

    return {
        "nodes": core.list_node,
        "namespaces": core.list_namespace,
        "pods": core.list_pod_for_all_namespaces,
        "services": core.list_service_for_all_namespaces,
        "deployments": apps.list_deployment_for_all_namespaces,
        "statefulsets": apps.list_stateful_set_for_all_namespaces,
        "daemonsets": apps.list_daemon_set_for_all_namespaces,
        "jobs": batch.list_job_for_all_namespaces,
        "cronjobs": batch.list_cron_job_for_all_namespaces,
        "rollouts": rollouts,
    }


class _ExpiredError(Exception):
    pass


class InventoryReader:
    """Reads the inventory through one :class:`kubernetes.client.ApiClient`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        page_size: int = PAGE_SIZE,
        request_timeout: tuple[float, float] = (5.0, 60.0),
    ) -> None:
        self.api = api
        self.server = api.configuration.host
        self.page_size = page_size
        self.request_timeout = request_timeout
        self._listers = _listers(api)
        self._requests = 0

    # -- errors ---------------------------------------------------------------------------

    def _unavailable(self, error: BaseException) -> KubernetesUnavailableError:
        if isinstance(error, ApiException):
            if error.status == 401:
                detail = "401 Unauthorized: the ServiceAccount token was refused"
            else:
                detail = f"answered {error.status} {error.reason or ''}".strip()
            return KubernetesUnavailableError(self.server, detail, error.status)
        reason = getattr(error, "reason", None)
        cause = reason if isinstance(reason, BaseException) else error
        text = str(cause)
        if "Connection refused" in text or isinstance(cause, ConnectionRefusedError):
            detail = "connection refused"
        elif isinstance(cause, TimeoutError | urllib3.exceptions.TimeoutError):
            detail = "timed out"
        else:
            detail = text.rsplit(": ", 1)[-1] if text else cause.__class__.__name__
        return KubernetesUnavailableError(self.server, detail)

    # -- calls ----------------------------------------------------------------------------

    def version(self) -> str | None:
        self._requests += 1
        try:
            info = client.VersionApi(self.api).get_code(_request_timeout=self.request_timeout)
        except ApiException as e:
            if e.status in (401,) or (e.status or 0) >= 500:
                raise self._unavailable(e) from None
            return None  # /version is public; a refusal is no reason to stop
        except (urllib3.exceptions.HTTPError, OSError, ConfigException) as e:
            raise self._unavailable(e) from None
        return str(info.git_version) if info.git_version else None

    def _pages(self, kind: Kind, field_selector: str | None) -> Iterator[list[dict[str, Any]]]:
        lister = self._listers[kind.plural]
        token: str | None = None
        while True:
            self._requests += 1
            kwargs: dict[str, Any] = {
                "limit": self.page_size,
                "_preload_content": False,
                "_request_timeout": self.request_timeout,
            }
            if token:
                kwargs["_continue"] = token
            if field_selector:
                kwargs["field_selector"] = field_selector
            try:
                answer = lister(**kwargs)
                try:
                    data = json.loads(answer.data)
                finally:
                    answer.release_conn()
            except ApiException as e:
                if e.status == 410 and token:
                    raise _ExpiredError from None
                raise
            yield data.get("items") or []
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return

    def _list(
        self, kind: Kind, exclude: frozenset[str], keep: int | None
    ) -> tuple[int, list[dict[str, Any]]]:
        """(how many objects, the summaries of the first ``keep`` of them)."""
        if exclude:
            key = "metadata.namespace" if kind.namespaced else "metadata.name"
            selector: str | None = ",".join(f"{key}!={ns}" for ns in sorted(exclude))
        else:
            selector = None
        for attempt in (0, 1):
            count = 0
            kept: list[dict[str, Any]] = []
            try:
                for items in self._pages(kind, selector):
                    for item in items:
                        meta = item.get("metadata") or {}
                        # The field selector already did this; a server that ignores it
                        # must not leak excluded namespaces.
                        scope = meta.get("namespace") if kind.namespaced else meta.get("name")
                        if scope in exclude:
                            continue
                        count += 1
                        if keep is None or len(kept) < keep:
                            kept.append(kind.summarize(item))
            except _ExpiredError:
                if attempt:
                    raise ApiException(status=410, reason="Expired") from None
                log.debug("list of %s expired mid-way; listing again from the start", kind.plural)
                continue
            return count, kept
        raise AssertionError("unreachable")

    def read(self, config: InventoryConfig) -> Reading:
        started = time.perf_counter()
        self._requests = 0
        version = self.version()
        counts: dict[str, int] = {}
        objects: dict[str, list[dict[str, Any]]] = {}
        truncated: dict[str, dict[str, int]] = {}
        problems: dict[str, str] = {}
        refused: dict[str, int | None] = {}  # kind → the HTTP status that refused it
        for kind in KINDS:
            keep = config.pod_limit if kind.plural == "pods" else None
            try:
                count, kept = self._list(kind, config.exclude_namespaces, keep)
            except ApiException as e:
                if e.status == 403:
                    problems[kind.plural] = f"403: {_status_message(e)}"
                    refused[kind.plural] = e.status
                    continue
                if e.status == 404 and kind.crd:
                    counts[kind.plural], objects[kind.plural] = 0, []
                    continue
                if e.status in (401, 429) or (e.status or 0) >= 500:
                    raise self._unavailable(e) from None
                problems[kind.plural] = f"{e.status}: {_status_message(e)}"
                refused[kind.plural] = e.status
                continue
            except (urllib3.exceptions.HTTPError, OSError, ConfigException) as e:
                raise self._unavailable(e) from None
            counts[kind.plural] = count
            objects[kind.plural] = kept
            if keep is not None and count > keep:
                truncated[kind.plural] = {"limit": keep, "total": count}
        unread = [
            inventory_problem(kind, refused[kind.plural], problems[kind.plural])
            for kind in KINDS
            if kind.plural in problems
        ]
        snapshot = InventorySnapshot.model_validate(
            {
                "cluster_slug": config.cluster_slug,
                "cluster_name": config.cluster_name,
                "collected_at": datetime.now(UTC),
                "sync_interval_seconds": config.sync_interval,
                "kubernetes_version": version,
                "counts": counts,
                "objects": objects,
                "truncated": truncated,
                "excluded_namespaces": sorted(config.exclude_namespaces),
                "errors": [problem.message for problem in unread],
                "problems": unread,
            }
        )
        return Reading(
            snapshot, problems, requests=self._requests, seconds=time.perf_counter() - started
        )
