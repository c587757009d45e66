"""The command ledger on disk: a snapshot (``commands.json``, ``LedgerFile``) and a journal of
changes since (``commands.journal``). After every change what is on disk, read back, is the
ledger as it is in memory; a stop folds the journal so the snapshot alone holds everything (what
an older build reads); a crash can tear only the journal's last line, which is dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.ledger import CommandLedger, LedgerFile, read_ledger
from contracts.messages import Command, CommandKind, CommandResult, CommandStatus


def _command(i: int) -> Command:
    return Command(command_id=f"cmd-{i}", kind=CommandKind.PING, issued_at=datetime.now(UTC))


def _result(command: Command, i: int) -> CommandResult:
    return CommandResult(
        command_id=command.command_id,
        agent_id="agent-1",
        kind=command.kind,
        status=CommandStatus.SUCCEEDED,
        finished_at=datetime.now(UTC),
        detail={"n": i, "text": 'é "quoted"\n'},
    )


def _in_memory(ledger: CommandLedger) -> list:
    return [ledger.get(c) for c in ledger._entries]


def _on_disk(tmp_path: Path) -> list:
    owner, entries = read_ledger(tmp_path)
    assert owner == "agent-1"
    return entries


def test_every_change_is_on_disk_as_the_ledger_is_now(tmp_path: Path) -> None:
    ledger = CommandLedger(tmp_path, "agent-1", limit=4)
    for i in range(11):
        command = _command(i)
        ledger.begin(command)
        assert _on_disk(tmp_path)[-1].result is None
        ledger.finish(_result(command, i))
        assert _on_disk(tmp_path)[-1].result == ledger.get(command.command_id).result
        if i != 2:  # cmd-2's result stays owed: never trimmed
            ledger.mark_delivered(command.command_id)
            assert _on_disk(tmp_path)[-1].delivered
        # Trimmed entries may linger on disk until the next fold; a load trims them again.
        again = CommandLedger(tmp_path, "agent-1", limit=4)
        again.load()
        assert _in_memory(again) == _in_memory(ledger)

    assert list(ledger._entries) == ["cmd-2", "cmd-8", "cmd-9", "cmd-10"]
    assert [r.command_id for r in ledger.undelivered()] == ["cmd-2"]


def test_the_journal_is_folded_at_the_ledger_size_and_on_fold(tmp_path: Path) -> None:
    ledger = CommandLedger(tmp_path, "agent-1", limit=4)
    for i in range(3):
        ledger.begin(_command(i))
    assert len(ledger.journal.read_bytes().splitlines()) == 1 + 3  # header + 3 changes
    ledger.begin(_command(3))
    ledger.begin(_command(4))  # the fifth change: the journal had 4 lines, folded instead
    assert not ledger.journal.exists()
    snapshot = LedgerFile.model_validate_json(ledger.path.read_bytes())
    assert [e.command_id for e in snapshot.entries] == [f"cmd-{i}" for i in range(5)]

    ledger.finish(_result(_command(4), 4))
    assert ledger.journal.exists()
    ledger.fold()
    assert not ledger.journal.exists(), "a stopped agent leaves the snapshot alone"
    snapshot = LedgerFile.model_validate_json(ledger.path.read_bytes())
    assert snapshot.entries == _in_memory(ledger)


def test_a_torn_last_line_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    ledger = CommandLedger(tmp_path, "agent-1")
    ledger.begin(_command(1))
    ledger.finish(_result(_command(1), 1))
    with ledger.journal.open("ab") as journal:
        journal.write(b'{"command_id":"cmd-2","ki')  # a crash mid-append
    again = CommandLedger(tmp_path, "agent-1")
    again.load()
    assert list(again._entries) == ["cmd-1"]
    assert again.get("cmd-1").result is not None
    assert not again.journal.exists(), "loading folds what it replayed"


def test_an_interrupted_command_is_recorded_failed_and_a_corrupt_journal_set_aside(
    tmp_path: Path,
) -> None:
    ledger = CommandLedger(tmp_path, "agent-1")
    ledger.begin(_command(1))  # the process stops before the result
    again = CommandLedger(tmp_path, "agent-1")
    again.load()
    assert again.get("cmd-1").result.status is CommandStatus.FAILED
    assert _on_disk(tmp_path)[0].result.status is CommandStatus.FAILED

    again.fold()
    again.begin(_command(2))
    again.journal.write_bytes(again.journal.read_bytes() + b"not json\n")
    again.begin(_command(3))
    third = CommandLedger(tmp_path, "agent-1")
    third.load()
    assert list(third._entries) == ["cmd-1", "cmd-2"], "the changes before the bad line stand"
    assert third.get("cmd-2").result.status is CommandStatus.FAILED  # interrupted
    assert len(list(tmp_path.glob("commands.journal.corrupt-*"))) == 1


def test_a_failed_append_leaves_no_half_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    ledger = CommandLedger(tmp_path, "agent-1")
    ledger.begin(_command(1))
    before = ledger.journal.read_bytes()
    real_write = os.write

    def disk_full(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError):
        ledger.begin(_command(2))
    monkeypatch.undo()
    assert ledger.journal.read_bytes() == before
    assert ledger.get("cmd-2") is None, "not begun: taken as new when it comes again"
    ledger.begin(_command(3))
    _, entries = read_ledger(tmp_path)
    assert [e.command_id for e in entries] == ["cmd-1", "cmd-3"]


def test_another_identitys_ledger_is_not_read(tmp_path: Path) -> None:
    ledger = CommandLedger(tmp_path, "agent-0")
    ledger.begin(_command(1))
    mine = CommandLedger(tmp_path, "agent-1")
    mine.load()
    assert list(mine._entries) == []
    assert read_ledger(tmp_path) == ("agent-1", [])


def test_a_start_after_a_clean_stop_reads_the_snapshot_without_rewriting_it(tmp_path: Path) -> None:
    ledger = CommandLedger(tmp_path, "agent-1")
    command = _command(1)
    ledger.begin(command)
    ledger.finish(_result(command, 1))
    ledger.fold()  # a clean stop
    snapshot = tmp_path / "commands.json"
    before = snapshot.stat()
    assert not ledger.journal.exists()

    again = CommandLedger(tmp_path, "agent-1")
    again.load()
    after = snapshot.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _in_memory(again) == _in_memory(ledger)
    # The next change starts a journal of its own, and a later start folds it.
    again.mark_delivered(command.command_id)
    assert again.journal.exists()
    third = CommandLedger(tmp_path, "agent-1")
    third.load()
    assert not third.journal.exists() and third.get(command.command_id).delivered
