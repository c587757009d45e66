"""Rate limits on sign-in and enrollment, per source address and per token prefix.

Counters come from the ``limits`` library (sliding-window counters in memory). Each Console
replica holds its own: behind N replicas an address or token gets up to N times the configured
rate, and a restart forgets the counters. The limits are there to blunt floods and guessing from
one place, not to meter exactly. The source address is the one uvicorn reports: behind a proxy
or ingress, run uvicorn with ``--forwarded-allow-ips`` set to the proxy so it is the client's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import SlidingWindowCounterRateLimiter

from console.core.settings import ConsoleSettings
from console.errors import TooManyRequestsError
from contracts.vocabulary import ErrorReason

__all__ = ["RateLimits", "Rule"]


@dataclass(frozen=True, slots=True)
class Rule:
    """The rates of one door (``sign_in``, ``enroll``): per source, per token prefix."""

    door: str
    per_source: list[RateLimitItem]
    per_token: list[RateLimitItem]


class RateLimits:
    def __init__(self, settings: ConsoleSettings) -> None:
        self._limiter = SlidingWindowCounterRateLimiter(MemoryStorage())
        self.sign_in = Rule(
            "sign_in",
            parse_many(settings.sign_in_rate_per_source),
            parse_many(settings.sign_in_rate_per_token),
        )
        self.enroll = Rule(
            "enroll",
            parse_many(settings.enroll_rate_per_source),
            parse_many(settings.enroll_rate_per_token),
        )

    def check(self, rule: Rule, *, source: str, token_prefix: str | None) -> None:
        """Count one attempt; raise ``TooManyRequestsError`` (429) when a rate is exceeded.

        The source is counted first: past its limit, the token's counter is left alone, so an
        address spraying made-up prefixes cannot exhaust a real token's allowance."""
        self._hit(rule, rule.per_source, "source", source)
        if token_prefix:
            self._hit(rule, rule.per_token, "token", token_prefix)

    def _hit(self, rule: Rule, items: list[RateLimitItem], kind: str, key: str) -> None:
        for item in items:
            if not self._limiter.hit(item, rule.door, kind, key):
                reset = self._limiter.get_window_stats(item, rule.door, kind, key).reset_time
                retry_after = max(1, math.ceil(reset - time.time()))
                raise TooManyRequestsError(
                    ErrorReason.RATE_LIMITED,
                    f"too many {rule.door.replace('_', '-')} attempts from this "
                    f"{'address' if kind == 'source' else 'token'} (limit {item}): "
                    f"retry in {retry_after} s",
                    retry_after=retry_after,
                )
