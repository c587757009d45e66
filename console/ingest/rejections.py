"""A bad row never poisons a shared batch: the ingester's batches are written whole, and when
one fails for a reason other than an outage it is split in halves until each bad row stands
alone; every good row is written, each bad one is tried again with the next batches and dropped
after ``PROXIMA_INGEST_ROW_ATTEMPTS`` failures, counted
(``proxima_messages_rejected_total{kind, reason}``) and logged once with its agent id.

Rules, in order:

1. A batch that commits is done (one transaction, the common case).
2. A database outage (:class:`~console.errors.ServiceUnavailableError`) is nobody's row: the
   writing stops and the caller keeps the rows not written (the outage is logged once
   elsewhere).
3. Any other failure of a batch of more than one row splits it in two, each half written on its
   own (so one bad row among ``n`` costs about ``2 log2 n`` extra transactions).
4. A row that fails alone counts one failure against its key (an agent id, a command id);
   below the attempts it is kept for the next batch, at the attempts it is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from prometheus_client import Counter

from console.core.outages import describe
from console.errors import ServiceUnavailableError
from contracts.vocabulary.messages import MessageKind, RejectionReason

__all__ = ["REJECTED", "Isolated", "RowFailures", "isolate", "reject"]

log = logging.getLogger(__name__)

REJECTED = Counter(
    "proxima_messages_rejected_total",
    "Agent messages dropped, not stored: by kind and reason (a RejectionReason)",
    ["kind", "reason"],
)
for _kind in MessageKind:
    for _reason in RejectionReason:
        REJECTED.labels(_kind.value, _reason.value)  # every series exists from the start

_LOGGED_MAX = 10_000
_logged: set[tuple[MessageKind, RejectionReason, str]] = set()


def reject(
    kind: MessageKind, reason: RejectionReason, agent_id: str, problem: str | None = None
) -> None:
    """Count one dropped message; log it the first time this agent has one dropped this way."""
    REJECTED.labels(kind.value, reason.value).inc()
    key = (kind, reason, agent_id)
    if key in _logged:
        log.debug("%s from agent %s dropped (%s): %s", kind, agent_id, reason, problem)
        return
    if len(_logged) >= _LOGGED_MAX:
        _logged.clear()
    _logged.add(key)
    log.warning(
        "%s from agent %s dropped (%s)%s; further ones from it are only counted",
        kind,
        agent_id,
        reason,
        f": {problem}" if problem else "",
    )


K = TypeVar("K", bound=Hashable)


class RowFailures(Generic[K]):
    """How often each key's row failed alone, within ``attempts`` (a bounded table)."""

    def __init__(self, attempts: int, *, max_keys: int = 100_000) -> None:
        self.attempts = max(1, attempts)
        self._counts: dict[K, int] = {}
        self._max_keys = max_keys

    def failed(self, key: K) -> bool:
        """Count a failure; True when the row has used its attempts and is to be dropped."""
        count = self._counts.pop(key, 0) + 1
        if count >= self.attempts:
            return True
        if len(self._counts) >= self._max_keys:
            self._counts.clear()
        self._counts[key] = count
        return False

    def written(self, key: K) -> None:
        self._counts.pop(key, None)


R = TypeVar("R")
T = TypeVar("T")


@dataclass(slots=True)
class Isolated(Generic[R, T]):
    """What a batch became: the parts that committed (with what each write returned), the rows
    that failed alone (with the failure's one line), and, after an outage, the rows not tried
    (``outage`` says why)."""

    written: list[tuple[list[R], T]] = field(default_factory=list)
    failed: list[tuple[R, str]] = field(default_factory=list)
    unwritten: list[R] = field(default_factory=list)
    outage: ServiceUnavailableError | None = None


async def isolate(rows: Sequence[R], write: Callable[[list[R]], Awaitable[T]]) -> Isolated[R, T]:
    """Write ``rows`` by the rules above, each part in its own transaction (``write``)."""
    done: Isolated[R, T] = Isolated()
    pending: list[list[R]] = [list(rows)] if rows else []
    while pending:
        part = pending.pop()
        try:
            done.written.append((part, await write(part)))
        except ServiceUnavailableError as outage:
            done.outage = outage
            done.unwritten = [row for rest in (part, *reversed(pending)) for row in rest]
            return done
        except Exception as error:  # a bad row or a bug: split until it stands alone
            if len(part) == 1:
                done.failed.append((part[0], describe(error)))
                continue
            half = len(part) // 2
            pending.extend((part[half:], part[:half]))  # the first half is written first
    return done
