"""Commands from the Console: run each at most once, answer with a :class:`CommandResult`.

Handled command ids live in ``<data-dir>/commands.json`` and ``commands.journal`` (the last
:data:`LEDGER_LIMIT`; :class:`CommandLedger` says how the two files share the work), so a
command sent again — by a retrying flow, or redelivered after a reconnect — is answered with the
stored result instead of being run twice. The ledger is also the outbox of results: a result
stays there, never evicted, until the Console acknowledges its commit (``agent.delivery``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agent.backend import BackendClient
from agent.credentials import new_seed, public_key, rotation_proof
from agent.delivery import ResultDelivery
from agent.errors import BackendAnswerError, BackendError
from agent.files import append_durable, set_aside, write_atomic
from agent.session import NatsSession
from agent.signals import read_signals
from agent.state import StateStore
from contracts.messages import Command, CommandKind, CommandResult, CommandStatus
from contracts.vocabulary.commands import CommandFailureKind

__all__ = [
    "JOURNAL_FILE",
    "LEDGER_FILE",
    "CommandDispatcher",
    "CommandLedger",
    "CredentialRotation",
    "Handler",
    "Outcome",
    "ping_handler",
    "read_ledger",
]

log = logging.getLogger(__name__)

LEDGER_FILE = "commands.json"
JOURNAL_FILE = "commands.journal"
LEDGER_LIMIT = 256
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


class LedgerEntry(BaseModel):
    command_id: str
    kind: CommandKind
    received_at: datetime
    result: CommandResult | None = None
    delivered: bool = False


class LedgerFile(BaseModel):
    """The snapshot, ``commands.json``."""

    agent_id: str
    entries: list[LedgerEntry] = Field(default_factory=list)


class JournalHeader(BaseModel):
    """The first line of ``commands.journal``: whose changes follow."""

    agent_id: str


def read_ledger(data_dir: Path) -> tuple[str | None, list[LedgerEntry]]:
    """What is on disk: the snapshot with the journal's changes replayed over it (an entry's
    newest line wins, in place). Whose ledger it is (``None`` when there is none) and its
    entries, oldest first. A torn last journal line (a crash mid-append) is dropped; an
    unreadable snapshot or journal is set aside and read as empty."""
    entries: dict[str, LedgerEntry] = {}
    agent_id = None
    snapshot = data_dir / LEDGER_FILE
    raw = _read(snapshot)
    if raw is not None:
        try:
            ledger = LedgerFile.model_validate_json(raw)
        except ValidationError:
            log.warning(
                "command ledger %s is corrupt; moved it to %s", snapshot, set_aside(snapshot)
            )
        else:
            agent_id = ledger.agent_id
            entries = {e.command_id: e for e in ledger.entries}
    journal = data_dir / JOURNAL_FILE
    raw = _read(journal)
    if not raw:
        return agent_id, list(entries.values())
    lines = raw.split(b"\n")
    if lines[-1]:
        log.warning("command journal %s ends in a torn line (a crash mid-write); dropped", journal)
    try:
        header = JournalHeader.model_validate_json(lines[0])
    except ValidationError:
        log.warning("command journal %s is corrupt; moved it to %s", journal, set_aside(journal))
        return agent_id, list(entries.values())
    changes = []
    for n, line in enumerate(lines[1:-1], start=2):
        try:
            changes.append(LedgerEntry.model_validate_json(line))
        except ValidationError:
            aside = set_aside(journal)
            log.warning(
                "command journal %s is corrupt at line %d; the %d changes before it are kept, "
                "the file moved to %s",
                journal,
                n,
                len(changes),
                aside,
            )
            break
    if agent_id not in (None, header.agent_id):
        log.info("command journal %s belongs to agent %s; ignored", journal, header.agent_id)
        return agent_id, list(entries.values())
    for entry in changes:
        entries[entry.command_id] = entry
    return header.agent_id, list(entries.values())


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot read command ledger %s: %s; starting empty", path, e)
        return None


class CommandLedger:
    """The bounded, persisted memory of command ids this identity has handled.

    On disk it is a snapshot (``commands.json``, the whole ledger, replaced atomically) and a
    journal (``commands.journal``: one line per change since, each the changed entry whole,
    appended and ``fdatasync``-ed). A change costs one small append and one sync instead of
    rewriting up to 256 entries with four syncs; the journal is folded into the snapshot when
    it reaches the ledger's size and whenever this process stops (:meth:`fold`), so a build
    that reads only the snapshot — an older one a self_update rolls back to — finds everything
    a cleanly stopped agent wrote.
    """

    def __init__(self, data_dir: Path, agent_id: str, limit: int = LEDGER_LIMIT) -> None:
        self.path = data_dir / LEDGER_FILE
        self.journal = data_dir / JOURNAL_FILE
        self.agent_id = agent_id
        self.limit = limit
        self._entries: dict[str, LedgerEntry] = {}
        self._journal_lines = 0
        self._header = JournalHeader(agent_id=agent_id).model_dump_json().encode() + b"\n"

    def load(self, *, keep_open: frozenset[str] = frozenset()) -> None:
        """Read the ledger; commands cut short by a restart are recorded as failed, except those
        in ``keep_open`` (a ``self_update`` carried across exec, concluded by the new build)."""
        had_journal = self.journal.exists()  # before reading: a corrupt one is set aside
        owner, entries = read_ledger(self.path.parent)
        if owner is None:
            return
        if owner != self.agent_id:
            log.info("command ledger %s belongs to agent %s; starting empty", self.path, owner)
            self._write_snapshot()
            return
        self._entries = {e.command_id: e for e in entries}
        self._trim()
        if had_journal:  # folded now, so the next change starts it anew; a snapshot alone
            self._write_snapshot()  # (a clean stop folded it) is already what is on disk
        for entry in entries:
            if entry.result is None and entry.command_id not in keep_open:
                entry.result = CommandResult(
                    command_id=entry.command_id,
                    agent_id=self.agent_id,
                    kind=entry.kind,
                    status=CommandStatus.FAILED,
                    finished_at=datetime.now(UTC),
                    error="the agent restarted while the command was running",
                    failure_kind=CommandFailureKind.INTERRUPTED,
                )
                self._record(entry)

    def fold(self) -> None:
        """Write the journal's changes into the snapshot and start the journal empty."""
        if self._journal_lines:
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        self._trim()
        entries = b",".join(e.model_dump_json().encode() for e in self._entries.values())
        empty = LedgerFile(agent_id=self.agent_id).model_dump_json().encode()  # {..."entries":[]}
        write_atomic(self.path, empty[:-2] + entries + empty[-2:])
        # After the snapshot: a crash in between replays changes the snapshot holds already,
        # which is harmless (each line is its entry whole).
        with contextlib.suppress(FileNotFoundError):
            self.journal.unlink()
        self._journal_lines = 0

    def _trim(self) -> None:
        # The oldest settled entries go first; a result still owed to the Console never does.
        extra = len(self._entries) - self.limit
        if extra > 0:  # usually one: found from the front, not by listing all 256 entries
            settled = (c for c, e in self._entries.items() if e.result is not None and e.delivered)
            for command_id in list(islice(settled, extra)):
                del self._entries[command_id]

    def _record(self, entry: LedgerEntry) -> None:
        if self._journal_lines >= self.limit:
            self._write_snapshot()
            return
        append_durable(self.journal, entry.model_dump_json().encode() + b"\n", first=self._header)
        self._journal_lines += 1
        self._trim()

    def get(self, command_id: str) -> LedgerEntry | None:
        return self._entries.get(command_id)

    def begin(self, command: Command) -> None:
        entry = LedgerEntry(
            command_id=command.command_id, kind=command.kind, received_at=datetime.now(UTC)
        )
        self._entries[command.command_id] = entry
        try:
            self._record(entry)
        except OSError:
            # Not durable, so not begun: the command is not run, and when it comes again it
            # is taken as new rather than ignored as running.
            del self._entries[command.command_id]
            raise

    def finish(self, result: CommandResult) -> None:
        entry = self._entries.get(result.command_id)
        if entry is None:
            # Its entry was lost (a corrupt ledger set aside): the result still counts.
            entry = LedgerEntry(
                command_id=result.command_id, kind=result.kind, received_at=result.finished_at
            )
            self._entries[result.command_id] = entry
        entry.result = result
        self._record(entry)

    def mark_delivered(self, command_id: str) -> None:
        entry = self._entries.get(command_id)
        if entry is not None and not entry.delivered:
            entry.delivered = True
            self._record(entry)

    def undelivered(self) -> list[CommandResult]:
        return [e.result for e in self._entries.values() if e.result and not e.delivered]


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
