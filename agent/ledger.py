"""The command ledger: the command ids this identity has handled, and the outbox of results.

Handled command ids live in ``<data-dir>/commands.json`` and ``commands.journal`` (the last
:data:`LEDGER_LIMIT`; :class:`CommandLedger` says how the two files share the work), so a
command sent again is answered with the stored result instead of being run twice
(``agent.commands``). A result stays here, never evicted, until the Console acknowledges its
commit (``agent.delivery``).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from agent.files import append_durable, set_aside, write_atomic
from contracts.messages import Command, CommandKind, CommandResult, CommandStatus
from contracts.vocabulary.commands import CommandFailureKind

__all__ = [
    "JOURNAL_FILE",
    "LEDGER_FILE",
    "LEDGER_LIMIT",
    "CommandLedger",
    "JournalHeader",
    "LedgerEntry",
    "LedgerFile",
    "read_ledger",
]

log = logging.getLogger(__name__)

LEDGER_FILE = "commands.json"
JOURNAL_FILE = "commands.journal"
LEDGER_LIMIT = 256


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
