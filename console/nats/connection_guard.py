"""At most a few NATS connections per agent key: what a user JWT cannot say.

nats-server enforces ``subs``, ``payload`` and ``exp`` from a user JWT, but a connection count
only per account (``conn``), which would let one agent use up the whole fleet's share. So the
Console's system-account user watches the fleet's ``$SYS.ACCOUNT.<account>.CONNECT`` and
``DISCONNECT`` advisories, counts the live connections of each user key, and kicks
(``$SYS.REQ.SERVER.<server>.KICK``) any connection past the limit at once. An agent needs one
connection; a self_update trial briefly adds a second.

Counts start empty when the Console starts, and again whenever its system connection reconnects
(connections made before are not counted until they reconnect); every Console replica keeps its
own count (a kick is idempotent).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter

log = logging.getLogger(__name__)

# One subscription for both advisories, so a connection's DISCONNECT never overtakes its CONNECT.
ACCOUNT_EVENTS = "$SYS.ACCOUNT.*.*"

KICKED = Counter(
    "proxima_nats_connections_kicked_total",
    "Agent connections closed by the Console for exceeding the per-key connection limit",
)

Request = Callable[[str, bytes], Awaitable[Any]]


class ConnectionGuard:
    """Counts live connections per user key and kicks those past ``limit``."""

    def __init__(self, *, limit: int, request: Request, exempt: set[str]) -> None:
        self.limit = limit
        self._request = request
        self._exempt = exempt  # the Console's own keys
        self._live: dict[str, set[tuple[str, int]]] = {}

    def reset(self) -> None:
        """Forget every count: after the system connection reconnects (its server died, so no
        DISCONNECT came for the connections it held; a restarted server has a new id), the
        stale entries would add up restart after restart until live agents were kicked."""
        self._live.clear()

    def connections(self, key: str) -> int:
        return len(self._live.get(key, ()))

    @staticmethod
    def _parse(data: bytes) -> tuple[str, str, int] | None:
        try:
            event = json.loads(data)
            client, server = event["client"], event["server"]
            key = client.get("nkey") or client.get("user") or ""
            return str(key), str(server["id"]), int(client["id"])
        except (ValueError, KeyError, TypeError):
            return None

    async def on_event(self, msg: Any) -> None:
        if msg.subject.endswith(".DISCONNECT"):
            self._forget(msg)
        elif msg.subject.endswith(".CONNECT"):
            await self._count(msg)

    async def _count(self, msg: Any) -> None:
        parsed = self._parse(msg.data)
        if parsed is None:
            return
        key, server, cid = parsed
        if not key or key in self._exempt:
            return
        live = self._live.setdefault(key, set())
        live.add((server, cid))
        if len(live) <= self.limit:
            return
        live.discard((server, cid))
        KICKED.inc()
        log.warning(
            "nats: key %s opened connection %d past its limit of %d; closing it",
            key,
            cid,
            self.limit,
        )
        try:
            await self._request(f"$SYS.REQ.SERVER.{server}.KICK", json.dumps({"cid": cid}).encode())
        except Exception as e:  # the connection may be gone already
            log.debug("nats kick of connection %d failed: %s", cid, e)

    def _forget(self, msg: Any) -> None:
        parsed = self._parse(msg.data)
        if parsed is None:
            return
        key, server, cid = parsed
        live = self._live.get(key)
        if live is not None:
            live.discard((server, cid))
            if not live:
                del self._live[key]
