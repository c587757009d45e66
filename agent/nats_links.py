"""Small helpers of the NATS session: its reconnect policy, URLs fit for logs, error words,
waiting on events, the JWT callback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from contracts.backoff import Backoff

__all__ = ["ReconnectPolicy", "describe_error", "display_url", "first_of", "returning"]


@dataclass(frozen=True)
class ReconnectPolicy:
    """Every knob of reconnection, named. ``max_attempts=None`` retries forever."""

    wait: float = 1.0
    max_wait: float = 30.0
    jitter: float = 0.2
    max_attempts: int | None = None
    connect_timeout: float = 5.0
    ping_interval: float = 20.0
    max_outstanding_pings: int = 3
    drain_timeout: float = 5.0

    def backoff(self) -> Backoff:
        return Backoff(initial=self.wait, maximum=self.max_wait, jitter=self.jitter)


def display_url(url: str) -> str:
    """``url`` without any user:password part, for logs."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


def describe_error(error: BaseException | None) -> str:
    if error is None:
        return "no server available"
    text = str(error).strip() or error.__class__.__name__
    return text.removeprefix("nats: ").strip("'")


async def first_of(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def returning(value: bytes) -> Callable[[], bytes]:
    """A callback that answers ``value`` (nats-py asks for the user JWT through one)."""

    def get() -> bytes:
        return value

    return get
