"""Wait on conditions with a deadline, never on fixed sleeps.

``wait_for`` (threads) and ``await_for`` (event loop) share one set of rules:

1. ``condition()`` is called at once, then again after 5 ms, 10 ms, 20 ms … capped at
   ``interval`` (0.05 s by default): fast when the condition is nearly there, cheap when not.
2. The first truthy value it returns is returned.
3. An exception raised by the condition means "not yet": polling goes on, and the last such
   error is quoted if the deadline passes. The exception is :class:`CannotHappenError`: a
   condition raises it when it knows it can never hold (the process it waits on exited), and
   the wait ends at once with it.
4. The condition is always tried at least once, and once more after the deadline; then
   :class:`ConditionTimeoutError` (an ``AssertionError``, so pytest shows it as a failure)
   names ``what`` was awaited.

``await_for`` accepts a condition returning a value or an awaitable.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

FIRST_DELAY = 0.005


class ConditionTimeoutError(AssertionError):
    """The condition did not hold before the deadline."""


class CannotHappenError(AssertionError):
    """Raised by a condition that can never hold any more: ends the wait at once."""


def _timed_out(timeout: float, what: str, condition: object, last: Exception | None) -> Exception:
    return ConditionTimeoutError(
        f"timed out after {timeout} s waiting for {what or condition}"
        + (f" (last error: {last!r})" if last else "")
    )


def wait_for(
    condition: Callable[[], T],
    timeout: float = 15.0,
    what: str = "",
    *,
    interval: float = 0.05,
) -> T:
    """Poll ``condition`` until it returns something truthy (see the module's rules)."""
    deadline = time.monotonic() + timeout
    delay = FIRST_DELAY
    last: Exception | None = None
    while True:
        try:
            value = condition()
        except CannotHappenError:
            raise
        except Exception as exc:
            last = exc
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, condition, last)
        time.sleep(delay)
        delay = min(delay * 2, interval)


async def await_for(
    condition: Callable[[], Awaitable[T] | T],
    timeout: float = 15.0,
    what: str = "",
    *,
    interval: float = 0.05,
) -> T:
    """``wait_for`` on the event loop: sleeps with ``asyncio.sleep``, awaits the condition's
    result when it is awaitable."""
    deadline = time.monotonic() + timeout
    delay = FIRST_DELAY
    last: Exception | None = None
    while True:
        try:
            value: Any = condition()
            if inspect.isawaitable(value):
                value = await value
        except CannotHappenError:
            raise
        except Exception as exc:
            last = exc
        else:
            if value:
                return value  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, condition, last)
        await asyncio.sleep(delay)
        delay = min(delay * 2, interval)
