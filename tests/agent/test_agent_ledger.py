"""The command ledger's file: what a write puts on disk is the whole ledger as ``LedgerFile``
gives it, after entries begin, finish, are delivered and are trimmed (entries' JSON is reused
between writes; a changed entry must never be written stale)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agent.commands import CommandLedger, LedgerFile
from contracts.messages import Command, CommandKind, CommandResult, CommandStatus


def _on_disk(path: Path) -> LedgerFile:
    return LedgerFile.model_validate_json(path.read_bytes())


def test_every_write_holds_the_ledger_as_it_is_now(tmp_path: Path) -> None:
    ledger = CommandLedger(tmp_path, "agent-1", limit=4)
    for i in range(7):
        command = Command(command_id=f"cmd-{i}", kind=CommandKind.PING, issued_at=datetime.now(UTC))
        ledger.begin(command)
        assert _on_disk(ledger.path).entries[-1].result is None
        result = CommandResult(
            command_id=command.command_id,
            agent_id="agent-1",
            kind=command.kind,
            status=CommandStatus.SUCCEEDED,
            finished_at=datetime.now(UTC),
            detail={"n": i, "text": 'é "quoted"\n'},
        )
        ledger.finish(result)
        assert _on_disk(ledger.path).entries[-1].result == result
        if i != 2:  # cmd-2's result stays owed: never trimmed
            ledger.mark_delivered(command.command_id)
            assert _on_disk(ledger.path).entries[-1].delivered
        expected = LedgerFile(agent_id="agent-1", entries=[ledger.get(c) for c in _ids(ledger)])
        assert ledger.path.read_bytes() == expected.model_dump_json().encode()

    assert _ids(ledger) == ["cmd-2", "cmd-4", "cmd-5", "cmd-6"]
    again = CommandLedger(tmp_path, "agent-1", limit=4)
    again.load()
    assert [r.command_id for r in again.undelivered()] == ["cmd-2"]


def _ids(ledger: CommandLedger) -> list[str]:
    return [e.command_id for e in _on_disk(ledger.path).entries]
