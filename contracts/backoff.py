"""The one back-off: exponential steps with every knob named (``initial``, ``maximum``,
``multiplier``, ``jitter``), for every process that retries (the agent's enrollment, NATS
session and result delivery; the Console's nats-server supervisor and its calls to Prefect);
the agent's reading of a Console's ``Retry-After``; and a rule for when a failing loop speaks up
so a long outage never floods the log. Stdlib only: the agent and the Console both import it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RETRY_AFTER_CAP", "Backoff", "RetryLog", "honour_retry_after"]

# The longest a Console's ``Retry-After`` is obeyed for at once: a bad header (a day, say)
# never parks an agent; past the cap it asks again.
RETRY_AFTER_CAP = 60.0


@dataclass(frozen=True)
class Backoff:
    """Attempt ``n`` (from 0) waits ``min(maximum, initial * multiplier**n)`` minus up to
    ``jitter`` of it at random, so a fleet that lost its backend does not return in lockstep."""

    initial: float = 1.0
    maximum: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum <= 0 or self.multiplier < 1:
            raise ValueError("backoff needs initial > 0, maximum > 0 and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter is a fraction between 0 and 1")

    def step(self, attempt: int) -> float:
        """The un-jittered wait after failed attempt ``attempt``."""
        start = min(self.initial, self.maximum)
        return float(min(self.maximum, start * self.multiplier ** min(attempt, 64)))

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        step = self.step(attempt)
        return step * (1.0 - self.jitter * rng())


def honour_retry_after(
    retry_after: float | None,
    own: float,
    *,
    cap: float = RETRY_AFTER_CAP,
    jitter: float = 0.2,
    rng: Callable[[], float] = random.random,
) -> float:
    """The wait before asking again: the Console's ``Retry-After`` (capped at ``cap``) plus up to
    ``jitter`` of it at random, so a fleet told the same time does not return in lockstep; never
    less than ``own``, the caller's backoff."""
    if retry_after is None or retry_after <= 0:
        return own
    asked = min(cap, retry_after)
    return max(own, asked * (1.0 + jitter * rng()))


class RetryLog:
    """Whether a retrying loop should log this failure.

    It logs when the outcome changes (a 409 became a 401), when the backoff step grows, and
    once the step is capped, at most every ``repeat_every`` seconds as a reminder.
    """

    def __init__(
        self, repeat_every: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.repeat_every = repeat_every
        self._clock = clock
        self._outcome: str | None = None
        self._step: float | None = None
        self._at = 0.0

    def should_log(self, outcome: str, step: float) -> bool:
        now = self._clock()
        changed = outcome != self._outcome
        grew = self._step is None or step > self._step
        stale = now - self._at >= self.repeat_every
        if changed or grew or stale:
            self._outcome, self._step, self._at = outcome, step, now
            return True
        return False

    def reset(self) -> None:
        self._outcome = self._step = None
