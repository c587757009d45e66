"""Host metrics with psutil, read through the host's /proc when it is mounted into a pod."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from agent.collectors import Publication
from contracts import subjects
from contracts.messages import HostMetrics

__all__ = ["HostMetricsCollector", "use_host_procfs"]

log = logging.getLogger(__name__)


def use_host_procfs(host_proc: Path | None) -> None:
    """Point psutil at the host's /proc (``PROXIMA_HOST_PROC``) instead of the container's."""
    if host_proc is not None:
        psutil.PROCFS_PATH = str(host_proc)


class HostMetricsCollector:
    """A :class:`agent.collectors.Collector`: one sample per call. CPU percent is measured
    between calls, so the first is primed."""

    name = "host metrics"

    def __init__(
        self,
        agent_id: str,
        host_root: Path,
        host_proc: Path | None = None,
        *,
        interval: float = 60.0,
    ) -> None:
        self.interval = interval
        self.agent_id = agent_id
        self.host_root = host_root
        self.host_proc = host_proc
        psutil.cpu_percent(interval=None)

    def _load1(self) -> float:
        if self.host_proc is not None:
            try:
                return float((self.host_proc / "loadavg").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0

    async def collect(self) -> Sequence[Publication]:
        sample = await asyncio.to_thread(self.sample)
        return [Publication(subjects.metrics(self.agent_id), sample.model_dump_json().encode())]

    def sample(self) -> HostMetrics:
        memory = psutil.virtual_memory()
        extra: dict[str, Any] = {"cpu_count": psutil.cpu_count() or 0}
        try:
            boot = psutil.boot_time()
            extra["boot_time"] = boot
            extra["host_uptime_seconds"] = max(0.0, time.time() - boot)
        except (OSError, RuntimeError) as e:
            log.debug("boot time unavailable: %s", e)
        try:
            swap = psutil.swap_memory()
            extra["swap_total_bytes"] = swap.total
            extra["swap_used_bytes"] = swap.used
        except (OSError, RuntimeError) as e:
            log.debug("swap figures unavailable: %s", e)
        disk_total: int | None = None
        disk_used: int | None = None
        try:
            disk = psutil.disk_usage(str(self.host_root))
            disk_total, disk_used = disk.total, disk.used
        except OSError as e:
            log.debug("disk usage of %s unavailable: %s", self.host_root, e)
        return HostMetrics(
            agent_id=self.agent_id,
            sent_at=datetime.now(UTC),
            cpu_percent=psutil.cpu_percent(interval=None),
            load1=self._load1(),
            memory_total_bytes=memory.total,
            memory_used_bytes=memory.used,
            disk_root_total_bytes=disk_total,
            disk_root_used_bytes=disk_used,
            extra=extra,
        )
