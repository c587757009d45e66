"""Keeping the agent's NATS JWT fresh: the Console signs it with an expiry (``exp``), and
nats-server refuses an expired JWT and closes a connection whose JWT expires.

Before that happens the agent asks the Console for a fresh JWT for its current key
(``POST /api/v1/agents/{id}/nats-credentials``, proven by a signature of that key), keeps it in
its state and reconnects with it: when two thirds of the JWT's lifetime have passed while
connected, and at connect time when the stored one is already (nearly) expired — an agent that
was stopped for longer than the lifetime comes back without a refusal. A Console that cannot be
reached is asked again, more often as the expiry nears.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Awaitable, Callable

from agent.state import StateStore

__all__ = ["jwt_lifetime", "refresh_if_expiring", "renew_before_expiry"]

log = logging.getLogger(__name__)

FetchJwt = Callable[[str, str], Awaitable[str | None]]
# Renewed when this share of the lifetime is left; at connect, when less than this is left.
_RENEW_SHARE = 1 / 3
_CONNECT_MARGIN_SECONDS = 30.0
_RETRY_MIN_SECONDS = 5.0


def jwt_lifetime(token: str | None) -> tuple[float, float] | None:
    """(issued at, expires at) of a JWT, unverified; ``None`` without an expiry."""
    if not token or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp, iat = claims.get("exp"), claims.get("iat", 0)
    except (ValueError, TypeError, AttributeError):
        return None
    if not isinstance(exp, int | float) or not isinstance(iat, int | float):
        return None
    return float(iat), float(exp)


async def _fetch(store: StateStore, fetch_jwt: FetchJwt) -> str | None:
    state = store.current
    token = await fetch_jwt(state.agent_id, state.seed.get_secret_value())
    if token is None or store.current.public_key != state.public_key:
        return None  # refused, unreachable, or the key rotated meanwhile
    store.update(nats_jwt=token)
    return token


async def refresh_if_expiring(
    store: StateStore, fetch_jwt: FetchJwt, now: Callable[[], float] = time.time
) -> None:
    """Before connecting: a fresh JWT when the stored one has expired or is about to (within
    30 s, or a tenth of its lifetime when that is shorter)."""
    lifetime = jwt_lifetime(store.current.nats_jwt)
    if lifetime is None:
        return
    issued, expires = lifetime
    if expires - now() > min(_CONNECT_MARGIN_SECONDS, (expires - issued) / 10):
        return
    if await _fetch(store, fetch_jwt) is not None:
        log.info("nats credentials renewed: the stored JWT had expired or was about to")


async def renew_before_expiry(
    store: StateStore,
    fetch_jwt: FetchJwt,
    reconnect: Callable[[str], None],
    now: Callable[[], float] = time.time,
) -> None:
    """While connected: renew when two thirds of the JWT's lifetime have passed, then ask the
    session to reconnect with it. Returns after asking (or when the JWT has no expiry)."""
    lifetime = jwt_lifetime(store.current.nats_jwt)
    if lifetime is None:
        return
    issued, expires = lifetime
    renew_at = expires - (expires - issued) * _RENEW_SHARE
    while True:
        await asyncio.sleep(max(0.0, renew_at - now()))
        if await _fetch(store, fetch_jwt) is not None:
            fresh = jwt_lifetime(store.current.nats_jwt)
            until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fresh[1])) if fresh else "-"
            reconnect(f"nats credentials renewed before expiry (new JWT valid until {until})")
            return
        left = expires - now()
        retry = max(_RETRY_MIN_SECONDS, left / 4)
        log.warning(
            "could not renew the nats JWT (it expires in %.0f s); asking again in %.0f s",
            max(left, 0.0),
            retry,
        )
        renew_at = now() + retry
