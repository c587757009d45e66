"""Commands from the Console: run each at most once, answer with a :class:`CommandResult`.

Handled command ids are kept in the ledger (``agent.ledger``), so a command sent again — by a
retrying flow, or redelivered after a reconnect — is answered with the stored result instead of
being run twice. The ledger is also the outbox of results: a result stays there, never evicted,
until the Console acknowledges its commit (``agent.delivery``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.backend import BackendClient
from agent.credentials import new_seed, public_key, rotation_proof
from agent.delivery import ResultDelivery
from agent.errors import BackendAnswerError, BackendError
from agent.ledger import CommandLedger
from agent.session import NatsSession
from agent.signals import read_signals
from agent.state import StateStore
from contracts.messages import Command, CommandKind, CommandResult, CommandStatus
from contracts.vocabulary.commands import CommandFailureKind

__all__ = [
    "CommandDispatcher",
    "CredentialRotation",
    "Handler",
    "Outcome",
    "ping_handler",
]

log = logging.getLogger(__name__)

_QUEUE_LIMIT = 1024


@dataclass
class Outcome:
    """What a handler decided; ``after`` runs once the result has been published.

    ``status`` ``None`` means the result comes later from elsewhere (a ``self_update`` handed
    over to the new build): nothing is published, the command stays open in the ledger, and the
    dispatcher takes no further commands in this process. A rejected or failed outcome says
    why twice: ``error`` for people, ``failure_kind`` for the Console and the flows.
    """

    status: CommandStatus | None
    error: str | None = None
    failure_kind: CommandFailureKind | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    after: Callable[[], None] | None = None


Handler = Callable[[Command], Awaitable[Outcome]]


class CommandDispatcher:
    """Takes messages from the session, runs handlers one at a time, publishes results."""

    def __init__(
        self,
        session: NatsSession,
        ledger: CommandLedger,
        handlers: Mapping[CommandKind, Handler],
        delivery: ResultDelivery,
    ) -> None:
        self.session = session
        self.ledger = ledger
        self.handlers = dict(handlers)
        self.delivery = delivery
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.executed: list[str] = []
        self._handed_over = False

    def submit(self, subject: str, payload: bytes) -> None:
        """Called from the NATS callback: never blocks, never runs a handler there."""
        if self._queue.qsize() >= _QUEUE_LIMIT:
            log.warning("dropping a command on %s: %d commands are queued", subject, _QUEUE_LIMIT)
            return
        self._queue.put_nowait((subject, payload))

    async def run(self) -> None:
        while not self._handed_over:
            item = await self._queue.get()
            try:
                await self._handle(*item)
            except Exception:
                log.exception("command handling failed")
        if self._queue.qsize():
            log.info(
                "%d queued commands dropped: this process hands over to a new build",
                self._queue.qsize(),
            )

    async def conclude(self, result: CommandResult) -> None:
        """Publish the result of a command concluded outside this loop (a ``self_update`` the
        previous build handed over). The caller has recorded it in the ledger already: the
        record must come before the update's files are cleaned up."""
        log.info(
            "command %s (%s) %s%s",
            result.command_id,
            result.kind,
            result.status,
            f": {result.error}" if result.error else "",
        )
        await self._deliver(result)

    async def _handle(self, subject: str, payload: bytes) -> None:
        try:
            command = Command.model_validate_json(payload)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, i['loc'])) or 'message'}: {i['msg']}"
                for i in e.errors(include_input=False, include_url=False)
            )
            log.warning("ignoring a malformed command on %s: %s", subject, problems)
            return
        known = self.ledger.get(command.command_id)
        if known is not None:
            if known.result is None:
                log.info(
                    "command %s (%s) is already running; ignoring the duplicate",
                    command.command_id,
                    command.kind,
                )
                return
            log.info(
                "command %s (%s) was already handled (%s); publishing its stored result again",
                command.command_id,
                command.kind,
                known.result.status,
            )
            await self._deliver(known.result)
            return
        self.ledger.begin(command)
        log.info("command %s (%s) received", command.command_id, command.kind)
        self.executed.append(command.command_id)
        handler = self.handlers.get(command.kind)
        if handler is None:
            outcome = Outcome(
                CommandStatus.REJECTED,
                error=f"{command.kind} not supported by this build",
                failure_kind=CommandFailureKind.UNSUPPORTED_COMMAND,
            )
        else:
            try:
                outcome = await handler(command)
            except Exception as e:
                log.exception("command %s (%s) failed", command.command_id, command.kind)
                outcome = Outcome(
                    CommandStatus.FAILED,
                    error=f"internal error: {e.__class__.__name__}",
                    failure_kind=CommandFailureKind.INTERNAL_ERROR,
                )
        if outcome.status is None:
            self._handed_over = True
            log.info(
                "command %s (%s) continues in the next build", command.command_id, command.kind
            )
            if outcome.after is not None:
                outcome.after()
            return
        result = CommandResult(
            command_id=command.command_id,
            agent_id=self.session.agent_id,
            kind=command.kind,
            status=outcome.status,
            finished_at=datetime.now(UTC),
            error=outcome.error,
            failure_kind=outcome.failure_kind,
            detail=outcome.detail,
        )
        self.ledger.finish(result)
        log.info(
            "command %s (%s) %s%s",
            command.command_id,
            command.kind,
            outcome.status,
            f": {outcome.error}" if outcome.error else "",
        )
        await self._deliver(result)
        if outcome.after is not None:
            outcome.after()

    async def _deliver(self, result: CommandResult) -> None:
        """Try once now; an unacknowledged result stays owed and ``delivery`` retries it."""
        if not await self.delivery.deliver(result):
            log.info(
                "result of command %s not acknowledged yet; it is kept and sent again",
                result.command_id,
            )


def ping_handler(detail: Callable[[], dict[str, Any]]) -> Handler:
    async def ping(command: Command) -> Outcome:
        return Outcome(CommandStatus.SUCCEEDED, detail={"pong": True, **detail()})

    return ping


class CredentialRotation:
    """``rotate_credentials``: a new key, proven by the old one, persisted before it is used.

    The new seed is written as ``pending_seed`` before the Console hears of it. If the answer is
    lost, the session tries the pending key when NATS refuses the old one, so a rotation the
    Console applied is never lost with the process.
    """

    def __init__(
        self,
        store: StateStore,
        backend: Callable[[], BackendClient],
        session: NatsSession,
        *,
        host_root: Path,
        host_sys: Path | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.session = session
        self.host_root = host_root
        self.host_sys = host_sys

    async def __call__(self, command: Command) -> Outcome:
        nonce = command.args.get("nonce")
        if not isinstance(nonce, str) or not 16 <= len(nonce) <= 128:
            return Outcome(
                CommandStatus.REJECTED,
                error="rotate_credentials needs args.nonce: a string of 16 to 128 characters",
                failure_kind=CommandFailureKind.BAD_ARGUMENTS,
            )
        state = self.store.current
        seed = new_seed()
        new_public = public_key(seed)
        self.store.update(pending_seed=seed)
        proof = rotation_proof(
            agent_id=state.agent_id,
            nonce=nonce,
            old_seed=state.seed.get_secret_value(),
            new_seed=seed,
            signals=read_signals(self.host_root, self.host_sys),
        )
        log.info("rotating credentials of agent %s: proposing key %s", state.agent_id, new_public)
        try:
            new_jwt = await self.backend().rotate_credentials(state.agent_id, proof)
        except BackendAnswerError as e:
            if self.store.current.public_key == new_public:
                return self._done(new_public)
            if e.definite:
                self.store.update(pending_seed=None)
                log.warning("credential rotation refused: %s; keeping the current key", e)
                return Outcome(
                    CommandStatus.FAILED,
                    error=str(e),
                    failure_kind=CommandFailureKind.ROTATION_FAILED,
                )
            return self._unknown(e)
        except BackendError as e:
            if self.store.current.public_key == new_public:
                return self._done(new_public)
            return self._unknown(e)
        if self.store.current.public_key != new_public:
            self.store.update(
                seed=seed,
                nats_jwt=new_jwt,
                pending_seed=None,
                pending_jwt=None,
                rotated_at=datetime.now(UTC),
            )
        return self._done(new_public)

    def _done(self, new_public: str) -> Outcome:
        log.info(
            "credentials rotated for agent %s: key is now %s; reconnecting to nats",
            self.store.current.agent_id,
            new_public,
        )
        return Outcome(
            CommandStatus.SUCCEEDED,
            detail={"public_key": new_public},
            after=lambda: self.session.use_current_credentials("credentials rotated"),
        )

    def _unknown(self, error: BackendError) -> Outcome:
        log.warning(
            "credential rotation outcome unknown: %s; the new key stays pending and is used if "
            "nats refuses the current one",
            error,
        )
        return Outcome(
            CommandStatus.FAILED,
            error=f"rotation outcome unknown: {error}",
            failure_kind=CommandFailureKind.ROTATION_UNCONFIRMED,
        )
