"""The Console's windows that other processes must agree with, published so the flows read
them instead of copying them (``GET /api/v1/settings``)."""

from __future__ import annotations

from console.auth import Principal
from console.schemas import PublishedSettings
from console.services.unit_of_work import ServiceRuntime
from contracts import parse_duration


def published_settings(rt: ServiceRuntime, principal: Principal) -> PublishedSettings:
    """Any valid token may read them: they are timings, not data."""
    del principal  # authenticated is enough
    s = rt.settings
    return PublishedSettings(
        quiet_window_seconds=s.identity_quiet_seconds,
        stale_after_seconds=s.agent_stale_seconds,
        rotation_timeout_seconds=s.rotation_timeout_seconds,
        enroll_clock_skew_seconds=s.enroll_clock_skew_seconds,
        k8s_sync_interval=s.k8s_sync_interval,
        k8s_sync_interval_seconds=parse_duration(s.k8s_sync_interval),
        rollout_sweep_seconds=s.rollout_sweep_seconds,
    )
