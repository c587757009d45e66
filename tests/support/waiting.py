"""Wait on conditions with a deadline, never on fixed sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class ConditionTimeoutError(AssertionError):
    pass


def wait_for(
    condition: Callable[[], T], *, timeout: float = 15.0, interval: float = 0.05, what: str = ""
) -> T:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as exc:  # keep polling; report the last error on timeout
            last_exc = exc
            value = None  # type: ignore[assignment]
        if value:
            return value
        time.sleep(interval)
    raise ConditionTimeoutError(
        f"timed out after {timeout} s waiting for {what or condition}"
        + (f" (last error: {last_exc!r})" if last_exc else "")
    )


async def await_for(
    condition: Callable[[], Awaitable[T]],
    *,
    timeout: float = 15.0,
    interval: float = 0.05,
    what: str = "",
) -> T:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = await condition()
        except Exception as exc:
            last_exc = exc
            value = None  # type: ignore[assignment]
        if value:
            return value
        await asyncio.sleep(interval)
    raise ConditionTimeoutError(
        f"timed out after {timeout} s waiting for {what or condition}"
        + (f" (last error: {last_exc!r})" if last_exc else "")
    )
