"""The cluster collector's loop: lead (or stand by), relist every syncInterval, publish chunks.

:class:`ClusterCollector` is a self-scheduled :mod:`agent.collectors` collector: the runtime
runs :meth:`ClusterCollector.run` beside the heartbeat, and the heartbeat carries
:meth:`ClusterCollector.heartbeat_fields` (leader, cluster slug, effective syncInterval).

- ``PROXIMA_REPLICAS=1``: this process leads from the start, without a Lease (no contention, no
  leader-election RBAC needed).
- more replicas: a :class:`agent.cluster.election.LeaseElector` campaigns on the Lease; only
  while it leads does the collector relist and publish. A sync starts at once on becoming
  leader, then every ``syncInterval``; a publish stops between chunks if leadership is lost.
- The relist runs in a worker thread; the gzip chunks are cut under the NATS server's
  ``max_payload`` as the live connection reports it.
- The API server unreachable: logged once, retried every ``syncInterval``, the recovery logged
  once. The agent stays enrolled, connected and ready: its identity does not depend on the
  cluster's API.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agent import __version__
from agent.cluster.client import ClientConfigError, make_api_client
from agent.cluster.election import LeaseElector, LeaseLock, LeaseTiming
from agent.cluster.inventory import (
    ROLLOUTS_FORBIDDEN,
    InventoryConfig,
    InventoryReader,
    KubernetesUnavailableError,
    Reading,
)
from agent.collectors import Collector, Publication
from agent.errors import ConfigError
from agent.problems import ProblemLog
from agent.settings import AgentSettings, setting_label
from agent.state import AgentState
from contracts import subjects
from contracts.durations import format_duration
from contracts.inventory import DEFAULT_CHUNK_BYTES, encode_chunks

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from agent.session import NatsSession

__all__ = ["ClusterCollector", "cluster_collectors"]

log = logging.getLogger(__name__)


def _pod_namespace(settings: AgentSettings) -> str:
    if settings.pod_namespace:
        return settings.pod_namespace
    try:
        namespace = (settings.service_account_dir / "namespace").read_text().strip()
    except OSError:
        namespace = ""
    return namespace or "default"


class ClusterCollector:
    name = "cluster inventory"

    def __init__(
        self,
        settings: AgentSettings,
        state: AgentState,
        *,
        api_factory: Callable[[], ApiClient] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        slug = settings.cluster_slug
        if not slug:
            raise ConfigError(
                setting_label("cluster_name"),
                "a cluster name or slug is required for k8s-cluster-collector",
            )
        self.agent_id = state.agent_id
        self.interval = settings.sync_interval
        self.config = InventoryConfig(
            cluster_name=settings.cluster_name or slug,
            cluster_slug=slug,
            sync_interval=settings.sync_interval,
            pod_limit=settings.pod_limit,
            exclude_namespaces=frozenset(settings.exclude_namespaces),
        )
        self.replicas = settings.replicas
        self.timing = LeaseTiming(
            settings.lease_duration, settings.lease_renew_deadline, settings.lease_retry_period
        )
        self.lease_name = settings.lease_name
        self.namespace = _pod_namespace(settings)
        # The pod name says which replica leads; the suffix keeps two processes that share a
        # name (a misconfiguration) from both believing they hold the Lease.
        self.identity = f"{state.name}_{secrets.token_hex(4)}"
        self._api_factory = api_factory or functools.partial(
            make_api_client,
            settings.service_account_dir,
            user_agent=f"proxima-agent/{__version__} (k8s-cluster-collector)",
        )
        self._clock = clock
        self._api: ApiClient | None = None
        self._reader: InventoryReader | None = None
        self.elector: LeaseElector | None = None
        self._wake = asyncio.Event()
        self._pending = True  # a snapshot is owed: never published, or the last one failed
        self._api_problems = ProblemLog(log)
        self._kind_problems: dict[str, str] = {}
        self.published = 0
        self.last_reading: Reading | None = None

    # -- what the heartbeat says ----------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        if self.replicas == 1:
            return True
        return self.elector is not None and self.elector.is_leader

    def heartbeat_fields(self) -> dict[str, Any]:
        return {
            "sync_interval_seconds": self.interval,
            "leader": self.is_leader,
            "cluster_slug": self.config.cluster_slug,
            # A collector samples no host: no metrics interval to report.
            "metrics_interval_seconds": None,
        }

    # -- one sync -------------------------------------------------------------------------

    def _ensure_api(self) -> ApiClient:
        """The client and the reader (blocking). The reader is built here, not at the first sync:
        the client's API classes import hundreds of model modules on first use (~1 s), which a
        standby pays now rather than when it takes over."""
        if self._api is None:
            self._api = self._api_factory()
        if self._reader is None:
            self._reader = InventoryReader(self._api)
        return self._api

    def read(self, max_payload: int = DEFAULT_CHUNK_BYTES) -> tuple[Reading, list[bytes]]:
        """Relist and encode (blocking): the reading and its chunks under ``max_payload``."""
        self._ensure_api()
        assert self._reader is not None
        reading = self._reader.read(self.config)
        chunks = encode_chunks(reading.snapshot, uuid.uuid4().hex, max_payload)
        return reading, chunks

    async def collect(self, max_payload: int = DEFAULT_CHUNK_BYTES) -> Sequence[Publication]:
        """One sync now, if this collector leads: the snapshot's chunks to publish."""
        if not self.is_leader:
            return []
        _reading, chunks = await asyncio.to_thread(self.read, max_payload)
        subject = subjects.inventory(self.agent_id)
        return [Publication(subject, chunk) for chunk in chunks]

    # -- the loop -------------------------------------------------------------------------

    def _on_connected(self) -> None:
        if self._pending:
            self._wake.set()

    def _on_leadership(self, leading: bool) -> None:
        if leading:
            self._pending = True
        self._wake.set()

    async def run(self, session: NatsSession) -> None:
        session.on_connected(self._on_connected)
        elector_task: asyncio.Task[None] | None = None
        if self.replicas == 1:
            log.info(
                "replicas: 1: this collector leads without a lease; inventory of cluster %s "
                "every %s",
                self.config.cluster_slug,
                format_duration(self.interval),
            )
            self._wake.set()
        else:
            lock = await self._lease_lock()
            self.elector = LeaseElector(
                lock, self.identity, timing=self.timing, on_change=self._on_leadership
            )
            elector_task = asyncio.create_task(self.elector.run(), name="leader election")
        try:
            await self._sync_loop(session)
        finally:
            if elector_task is not None:
                elector_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await elector_task
            if self.elector is not None:
                with contextlib.suppress(asyncio.TimeoutError, Exception):
                    await asyncio.wait_for(self.elector.release(), 3.0)
            if self._api is not None:
                with contextlib.suppress(Exception):
                    self._api.close()  # type: ignore[no-untyped-call]

    def _make_lock(self) -> LeaseLock:
        return LeaseLock(
            self._ensure_api(),
            self.lease_name,
            self.namespace,
            timeout=max(0.5, self.timing.renew_deadline / 2),
        )

    async def _lease_lock(self) -> LeaseLock:
        """The Lease, through a client built in a worker thread (loading a kubeconfig or the
        ServiceAccount mount, and the client's modules, blocks); retried until it can be."""
        while True:
            try:
                return await asyncio.to_thread(self._make_lock)
            except ClientConfigError as e:
                self._api_problems.failed(
                    f"config {e.detail}",
                    "cannot configure the kubernetes client from %s: %s; the collector needs "
                    "in-cluster credentials or KUBECONFIG; retrying every %s",
                    e.source,
                    e.detail,
                    format_duration(self.timing.retry_period),
                )
            await asyncio.sleep(self.timing.retry_period)

    async def _sync_loop(self, session: NatsSession) -> None:
        next_due = self._clock()
        while True:
            timeout = max(0.0, next_due - self._clock()) if self.is_leader else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            if not self.is_leader:
                continue
            if not self._pending and self._clock() < next_due:
                continue
            started = self._clock()
            await self._sync_once(session)
            next_due = started + self.interval

    async def _sync_once(self, session: NatsSession) -> None:
        if not session.readiness.nats_connected:
            self._pending = True
            log.debug("inventory sync skipped: nats not connected")
            return
        max_payload = session.max_payload or DEFAULT_CHUNK_BYTES
        try:
            reading, chunks = await asyncio.to_thread(self.read, max_payload)
        except ClientConfigError as e:
            self._api_problems.failed(
                f"config {e.detail}",
                "cannot configure the kubernetes client from %s: %s; the collector needs "
                "in-cluster credentials or KUBECONFIG; retrying every %s",
                e.source,
                e.detail,
                format_duration(self.interval),
            )
            return
        except KubernetesUnavailableError as e:
            self._api_problems.failed(
                e.key,
                "kubernetes API %s unavailable: %s; inventory paused, the agent stays "
                "connected and retries every %s",
                e.server,
                e.detail,
                format_duration(self.interval),
            )
            log.debug(
                "inventory sync failed (%d in a row): %s", self._api_problems.failures, e.detail
            )
            return
        except Exception as e:
            # A bug or an object we cannot read must not stop the agent: say it once, retry.
            self._api_problems.failed(
                f"error {type(e).__name__}: {e}",
                "inventory sync failed: %s; retrying every %s",
                e,
                format_duration(self.interval),
                level=logging.ERROR,
                exc_info=True,
            )
            return
        server = self._reader.server if self._reader is not None else "?"
        self._api_problems.recovered("kubernetes API %s available again: inventory flows", server)
        self.last_reading = reading
        self._report_kind_problems(reading)
        if not self.is_leader:
            log.info("leadership lost during the sync: this snapshot is not published")
            return
        if not await self._publish(session, chunks):
            self._pending = True
            log.info("inventory publish interrupted (nats disconnected or leadership lost)")
            return
        self._pending = False
        self.published += 1
        self._log_published(reading, chunks)

    async def _publish(self, session: NatsSession, chunks: list[bytes]) -> bool:
        subject = subjects.inventory(self.agent_id)
        for i, chunk in enumerate(chunks):
            if not self.is_leader:
                return False
            if i == len(chunks) - 1:
                sent = await session.publish_confirmed(subject, chunk)
            else:
                sent = await session.publish(subject, chunk)
            if not sent:
                return False
        return True

    def _report_kind_problems(self, reading: Reading) -> None:
        for kind, problem in reading.problems.items():
            if self._kind_problems.get(kind) == problem:
                continue
            if kind == "rollouts" and problem.startswith("403"):
                log.warning(
                    "%s (argoproj.io/v1alpha1 rollouts: %s): the chart is older than Argo "
                    "Rollouts support; helm upgrade to the current chart (upgrading the image "
                    "alone does not add the rule); the rest of the inventory still flows",
                    ROLLOUTS_FORBIDDEN,
                    problem,
                )
            else:
                log.warning(
                    "cannot read %s (%s); the rest of the inventory still flows: check the "
                    "cluster agent's ClusterRole (helm upgrade to the current chart)",
                    kind,
                    problem,
                )
        for kind in sorted(set(self._kind_problems) - set(reading.problems)):
            log.info("%s readable again", kind)
        self._kind_problems = dict(reading.problems)

    def _log_published(self, reading: Reading, chunks: list[bytes]) -> None:
        snapshot = reading.snapshot
        counts = ", ".join(f"{n} {kind}" for kind, n in snapshot.counts.items())
        truncated = "".join(
            f"; {kind} cut to {info['limit']} of {info['total']} (podLimit)"
            for kind, info in snapshot.truncated.items()
        )
        log.info(
            "inventory of cluster %s published: %s%s; %d chunk(s), %.0f KiB, relist %.2fs "
            "(%d requests)",
            snapshot.cluster_slug,
            counts,
            truncated,
            len(chunks),
            sum(len(c) for c in chunks) / 1024,
            reading.seconds,
            reading.requests,
        )


def cluster_collectors(settings: AgentSettings, state: AgentState) -> list[Collector]:
    return [ClusterCollector(settings, state)]
