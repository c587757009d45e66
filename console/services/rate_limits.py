"""Rate limits on sign-in, enrollment and the agents' signed credential calls.

Counters live in the Console's database (table ``rate_counter``), so every replica counts
against the same numbers and a restart keeps them. Each counter is a sliding-window counter
(the algorithm of the ``limits`` library, whose notation the settings use): the hits of the
current fixed window and of the one before, the older one weighted by how much of it still
overlaps the sliding window. A call's hits are one atomic upsert (``INSERT … ON CONFLICT DO
UPDATE … RETURNING``, a row a counter, the same SQL on SQLite and PostgreSQL); a refused hit is
taken back in the same transaction, so refusals do not extend a refusal. The limits are there
to blunt floods and guessing, not to meter exactly.

Who is counted, so that nobody can lock out a credential they do not hold:

1. A token's counter is keyed by the SHA-256 of the whole token, never by its public display
   prefix (token lists, the web UI and the audit log show that prefix): made-up tokens sharing
   a real token's prefix count against counters of their own.
2. A source's counter counts only attempts with a credential that is not valid (unknown,
   revoked, expired), and refuses only those: a request presenting a valid token is never
   throttled because others failed from its address (a NAT, a proxy). Its own rate is its
   token's counter.
3. The signed agent calls are counted per agent id (their credential is a signature the
   Console checks afterwards).

The source address is the connection's peer, or what ``X-Forwarded-For`` says when the peer is
one of ``PROXIMA_TRUSTED_PROXIES`` (``console.core.audit_log.client_address``).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from limits import RateLimitItem, parse_many
from sqlalchemy import delete
from sqlmodel import Session, col

from console.core.db import DriverStatement
from console.core.settings import ConsoleSettings
from console.errors import TooManyRequestsError
from console.models import RateCounter
from console.services.unit_of_work import UnitOfWork, UnitsOfWork
from contracts.vocabulary import ErrorReason

__all__ = ["RateLimits", "Rule", "delete_spent"]

_WHO = {"source": "address", "token": "token", "agent": "agent"}


@dataclass(frozen=True, slots=True)
class Rule:
    """The rates of one door (``sign_in``, ``enroll``, ``agent_credentials``)."""

    door: str
    per_source: list[RateLimitItem]
    per_token: list[RateLimitItem]


@dataclass(frozen=True, slots=True)
class _Refusal:
    door: str
    kind: str
    item: RateLimitItem
    retry_after: int


class RateLimits:
    def __init__(
        self,
        settings: ConsoleSettings,
        units: UnitsOfWork,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._units = units
        self._clock = clock
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
        # Signature-authenticated agent calls (``…/nats-credentials``, ``…/credentials``): per
        # agent id, the "token" of these calls.
        self.agent_credentials = Rule(
            "agent_credentials", [], parse_many(settings.agent_credentials_rate)
        )

    async def check(
        self, rule: Rule, *, source: str | None, token: str | None, valid: bool = False
    ) -> None:
        """Count one attempt in a unit of its own; raise ``TooManyRequestsError`` (429) when a
        rate is exceeded."""
        now = self._clock()
        await self._units.run(
            lambda uow: self.count(uow, rule, source=source, token=token, valid=valid, now=now),
            write=True,
            commit_on=(TooManyRequestsError,),
        )

    def count(
        self,
        uow: UnitOfWork,
        rule: Rule,
        *,
        source: str | None,
        token: str | None,
        valid: bool = False,
        now: float | None = None,
    ) -> None:
        """Count one attempt in ``uow`` (a caller's write unit: enrollment counts in its own
        transaction, saving a commit); raise ``TooManyRequestsError`` when a rate is exceeded,
        the refused hit already taken back.

        ``token`` is the credential presented (the whole token, or the agent id of a signed
        call) and ``valid`` whether the Console knows it as usable. The source is counted only
        for an attempt that is not valid, and first: past its limit, the token's counter is
        left alone."""
        hits: list[tuple[str, str, list[RateLimitItem]]] = []
        if source and rule.per_source and not valid:
            hits.append(("source", source, rule.per_source))
        if token and rule.per_token:
            hits.append((_kind(rule), _who(rule, token), rule.per_token))
        refusal = _count(uow, rule.door, hits, self._clock() if now is None else now)
        if refusal is not None:
            raise TooManyRequestsError(
                ErrorReason.RATE_LIMITED,
                f"too many {refusal.door.replace('_', '-')} attempts from this "
                f"{_WHO[refusal.kind]} (limit {refusal.item}): retry in {refusal.retry_after} s",
                retry_after=refusal.retry_after,
            )

    async def sweep(self) -> int:
        """Delete counters whose windows are over; how many."""
        now = self._clock()
        return await self._units.run(lambda uow: delete_spent(uow, now), write=True)


def delete_spent(uow: UnitOfWork, now: float) -> int:
    """Delete the counters whose windows ended before ``now`` (epoch seconds); how many. A
    repeated delete is a no-op, so any replica may run it."""
    gone = uow.session.exec(delete(RateCounter).where(col(RateCounter.expires_at) < now))
    return int(gone.rowcount or 0)


def _kind(rule: Rule) -> str:
    return "agent" if rule.door == "agent_credentials" else "token"


def _who(rule: Rule, token: str) -> str:
    """A token's counter is keyed by a digest of the whole token (its public prefix is shared
    by every guess an attacker makes); an agent id is public and keys its calls as it is."""
    if _kind(rule) == "agent":
        return token
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _count(
    uow: UnitOfWork,
    door: str,
    hits: list[tuple[str, str, list[RateLimitItem]]],
    now: float,
) -> _Refusal | None:
    """Every hit in one statement (one round trip; enrollment counts two on every call). The
    first hit over its rate is refused and taken back with every hit after it: the counts left
    are those of counting one at a time and stopping at the refusal."""
    counted = [
        (kind, item, _key(door, kind, who, item)) for kind, who, items in hits for item in items
    ]
    if not counted:
        return None
    keys = [key for _kind, _item, key in counted]
    if len(set(keys)) == len(keys):
        seen = _upsert(uow.session, [(key, item) for _kind, item, key in counted], now)
    else:  # one counter twice (a rate repeated in the settings): one statement per hit
        seen = {}
        for _kind, item, key in counted:
            seen.update(_upsert(uow.session, [(key, item)], now))
    for i, (kind, item, key) in enumerate(counted):
        count, previous = seen[key]
        retry_after = _verdict(item, count, previous, now)
        if retry_after is not None:
            for taken in keys[i:]:
                _TAKE_BACK.rows(uow.session, (taken,))
            return _Refusal(door, kind, item, retry_after)
    return None


def _key(door: str, kind: str, who: str, item: RateLimitItem) -> str:
    key = f"{door}/{kind}/{item.amount}per{item.get_expiry()}s/{who}"
    if len(key) > 128:  # an over-long path parameter, say: a digest keeps it bounded
        key = (
            f"{door}/{kind}/{item.amount}per{item.get_expiry()}s/#"
            + hashlib.sha256(who.encode()).hexdigest()
        )
    return key


# One statement on SQLite and PostgreSQL alike, in the driver's terms: building it with the ORM
# cost more than running it. In DO UPDATE every right-hand side reads the row as it was, and
# ``excluded`` is the row that was offered.
_UPSERT_SET = """
    ON CONFLICT (key) DO UPDATE SET
        previous = CASE
            WHEN rate_counter.slot = excluded.slot THEN rate_counter.previous
            WHEN rate_counter.slot = excluded.slot - 1 THEN rate_counter.count
            ELSE 0 END,
        count = CASE WHEN rate_counter.slot = excluded.slot THEN rate_counter.count + 1 ELSE 1 END,
        slot = excluded.slot,
        expires_at = excluded.expires_at
    RETURNING key, count, previous
"""
_TAKE_BACK = DriverStatement("UPDATE rate_counter SET count = count - 1 WHERE key = ?")


@cache
def _upsert_of(rows: int) -> DriverStatement:
    values = ", ".join(["(?, ?, 1, 0, ?)"] * rows)
    return DriverStatement(
        f"INSERT INTO rate_counter (key, slot, count, previous, expires_at) VALUES {values}"  # noqa: S608
        + _UPSERT_SET
    )


def _upsert(
    session: Session, hits: list[tuple[str, RateLimitItem]], now: float
) -> dict[str, tuple[int, int]]:
    """One hit on each key, atomically; each counter's (count, previous) after it."""
    params: list[object] = []
    for key, item in hits:
        period = float(item.get_expiry())
        slot = int(now // period)
        params += [key, slot, (slot + 2) * period]
    rows = _upsert_of(len(hits)).rows(session, tuple(params))
    return {key: (count, previous) for key, count, previous in rows}


def _verdict(item: RateLimitItem, count: int, previous: int, now: float) -> int | None:
    """None when the hit is within the rate, else the seconds to wait."""
    period = float(item.get_expiry())
    elapsed = now - int(now // period) * period
    estimate = previous * (period - elapsed) / period + count
    if estimate <= item.amount:
        return None
    return _retry_after(item.amount, count - 1, previous, period, elapsed)


def _retry_after(amount: int, count: int, previous: int, period: float, elapsed: float) -> int:
    """Seconds until one more hit fits: the older window's weight has to fall far enough, or,
    when the current window alone is full, the next window has to start."""
    if count + 1 > amount or previous == 0:
        wait = period - elapsed
    else:
        # previous * (period - t) / period + count + 1 <= amount  =>  t >= …
        t = period * (1 - (amount - count - 1) / previous)
        wait = max(0.0, t - elapsed)
    return max(1, math.ceil(wait))
