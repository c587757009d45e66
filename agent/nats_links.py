"""Small helpers of the NATS session: URLs fit for logs, error words, waiting on events."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

__all__ = ["describe_error", "display_url", "first_of"]


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
