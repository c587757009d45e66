"""Command results, delivered at least once: kept until the Console acknowledges the commit.

The outbox is the command ledger (``commands.json`` and its journal, mode 0600): a finished
command whose entry is not ``delivered`` is a result still owed. Each is sent as a NATS request
on ``proxima.agent.<id>.result``; the Console answers with a
:class:`~contracts.messages.ResultAck` only after the result's transaction has committed. Until
an answer settles it (``recorded``, ``duplicate``, ``not_tracked``, or ``refused`` with a reason
— retrying could not help), the result is sent again with backoff: on every reconnection, after
a restart of the agent (the ledger is read at start), while the Console or its database is down.
The Console's write is idempotent on the command id, so a second copy is harmless.

Not JetStream: every environment gets its own NATS account, and a stream per account is more to
run than a reply that is sent after the commit (``docs/rollouts.md``, "Delivery guarantees").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from pydantic import ValidationError

from contracts import subjects
from contracts.backoff import Backoff, RetryLog
from contracts.durations import format_duration
from contracts.messages import CommandResult, ResultAck, ResultAckOutcome

__all__ = ["ResultDelivery", "ResultOutbox"]

log = logging.getLogger(__name__)


class ResultOutbox(Protocol):
    """What delivery needs from the ledger."""

    def undelivered(self) -> list[CommandResult]: ...

    def mark_delivered(self, command_id: str) -> None: ...


class _Session(Protocol):
    @property
    def agent_id(self) -> str: ...

    def on_connected(self, callback: Callable[[], None]) -> None: ...

    async def request(self, subject: str, payload: bytes, wait: float) -> bytes | None: ...


class ResultDelivery:
    """Sends owed results until each is acknowledged; :meth:`run` retries with backoff."""

    def __init__(
        self,
        session: _Session,
        outbox: ResultOutbox,
        *,
        backoff: Backoff,
        ack_timeout: float = 5.0,
    ) -> None:
        self.session = session
        self.outbox = outbox
        self.backoff = backoff
        self.ack_timeout = ack_timeout
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._retry_log = RetryLog()
        self.requests = 0  # sent, including retries
        session.on_connected(self._wake.set)

    async def deliver(self, result: CommandResult) -> bool:
        """Try ``result`` now (it is in the outbox already); the retry loop takes it from
        there when this does not settle it. True when acknowledged."""
        async with self._lock:
            settled = await self._send(result)
        if not settled:
            self._wake.set()
        return settled

    async def run(self) -> None:
        """Deliver what is owed, now and after every reconnection, with backoff between
        rounds that leave something unacknowledged."""
        attempt = 0
        self._wake.set()
        while True:
            await self._wake.wait()
            self._wake.clear()
            owed = self.outbox.undelivered()
            if not owed:
                attempt = 0
                continue
            async with self._lock:
                left = [r for r in owed if not await self._send(r)]
            if not left:
                attempt = 0
                self._retry_log.reset()
                continue
            step = self.backoff.step(attempt)
            if self._retry_log.should_log("unacknowledged", step):
                log.info(
                    "%d command result(s) not acknowledged by the Console yet; they are kept "
                    "and sent again, next in %s",
                    len(left),
                    format_duration(round(step, 3)),
                )
            delay = self.backoff.delay(attempt)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # not wait_for: tests/agent/test_async_waits.py
                    await self._wake.wait()
            self._wake.set()

    async def _send(self, result: CommandResult) -> bool:
        self.requests += 1
        subject = subjects.command_result(self.session.agent_id)
        answer = await self.session.request(
            subject, result.model_dump_json().encode(), self.ack_timeout
        )
        if answer is None:
            return False
        try:
            ack = ResultAck.model_validate_json(answer)
        except ValidationError:
            log.warning("unreadable answer to result %s; sending it again", result.command_id)
            return False
        if ack.command_id != result.command_id or not ack.outcome.settled:
            return False
        if ack.outcome is ResultAckOutcome.REFUSED:
            log.warning(
                "the Console refused the result of command %s (%s): %s; it is not sent again",
                result.command_id,
                ack.reason,
                ack.message,
            )
        self.outbox.mark_delivered(result.command_id)
        return True
