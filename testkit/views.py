"""The Console's read shapes (``contracts.views``) built with plain defaults, for unit tests of
the code that reads them (the flows' pure rules): only the fields a test cares about are given."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.views import AgentView, ClusterView, EnrollmentConflictView

__all__ = ["agent_view", "cluster_view", "conflict_view"]

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def conflict_view(
    reason: str | None, count: int, last_at: datetime = _EPOCH
) -> EnrollmentConflictView:
    return EnrollmentConflictView(reason=reason, count=count, last_at=last_at.isoformat())


def agent_view(agent_id: str, name: str, agent_type: str = "host", **fields: Any) -> AgentView:
    """An online agent seen half a second ago, with no flags; ``fields`` override any field."""
    base: dict[str, Any] = {
        "id": agent_id,
        "client_id": "client-1",
        "environment_id": "env-1",
        "agent_type": agent_type,
        "name": name,
        "version": "0.8.0",
        "instance_id": f"i-{agent_id}",
        "status": "online",
        "enrolled_at": _EPOCH,
        "last_seen_at": _EPOCH,
        "seconds_since_seen": 0.5,
        "can_self_update": False,
        "labels": {},
        "flags": [],
        "heartbeat_interval_seconds": 30.0,
        "metrics_interval_seconds": None,
        "sync_interval_seconds": None,
        "released_at": None,
        "revoked_at": None,
        "credentials_rotated_at": None,
    }
    return AgentView.model_validate({**base, **fields})


def cluster_view(slug: str, **fields: Any) -> ClusterView:
    """A registered cluster with no inventory, agents nor warnings; ``fields`` override."""
    base: dict[str, Any] = {
        "id": f"c-{slug}",
        "slug": slug,
        "name": slug,
        "environment_id": "env-1",
        "registered": True,
        "created_at": _EPOCH,
        "first_inventory_at": None,
        "last_inventory_at": None,
        "kubernetes_version": None,
        "sync_interval_seconds": None,
        "backend_sync_interval_seconds": 300.0,
        "counts": {},
        "truncated": {},
        "errors": [],
        "inventory_problems": [],
        "agents": [],
        "node_agents": 0,
        "warnings": [],
    }
    return ClusterView.model_validate({**base, **fields})
