"""Agent records written straight into the Console's database, for benchmarks and tests that
need many (or one exactly shaped) without enrolling each: :func:`agent_row` is one host agent's
``agent`` row as enrollment leaves it, the caller's columns laid over it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["agent_row"]


def agent_row(
    *,
    agent_id: str,
    client_id: str,
    environment_id: str,
    name: str,
    public_key: str,
    enrolled_at: datetime,
    **columns: Any,
) -> dict[str, Any]:
    """A host agent, version 0.8.0, self-updatable, no labels, no conflict; ``columns``
    (``last_seen_at``, ``labels``, ``revoked_at`` …) override or add to that."""
    return {
        "id": agent_id,
        "client_id": client_id,
        "environment_id": environment_id,
        "agent_type": "host",
        "name": name,
        "nats_public_key": public_key,
        "version": "0.8.0",
        "can_self_update": True,
        "labels": {},
        "enrolled_at": enrolled_at,
        "conflict_count": 0,
        **columns,
    }
