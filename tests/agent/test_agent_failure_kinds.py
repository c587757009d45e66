"""Every failed or rejected command result says why as a fact (``failure_kind``), next to the
prose of ``error``: the self_update step table, the blockers, the dispatcher's own refusals and
the ledger's interrupted commands (no English text is matched across processes)."""

from __future__ import annotations

import base64
import errno
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.commands import Outcome
from agent.ledger import LEDGER_FILE
from agent.runtime import AgentRuntime
from agent.selfupdate.failures import FailedStep, UpdateFailure, failure_fields, failure_kind
from agent.selfupdate.marker import MarkerStore, Phase, new_marker
from agent.selfupdate.probation import StartAction, plan_at_start
from agent.selfupdate.program import self_update_blocker
from contracts import subjects
from contracts.messages import Command, CommandFailureKind, CommandKind
from contracts.vocabulary import AgentType
from testkit.nats import NatsServer
from testkit.runtime import Inbox, enrolled, ready, running, send_command, settings
from testkit.waiting import await_for

K = CommandFailureKind

# -- self_update: the failed step → its kind ------------------------------------------------

STEP_KINDS = {
    FailedStep.DOWNLOAD: K.DOWNLOAD_FAILED,
    FailedStep.DOWNLOAD_TOO_LARGE: K.DOWNLOAD_TOO_LARGE,
    FailedStep.CHECKSUM: K.CHECKSUM_MISMATCH,
    FailedStep.SIGNATURE: K.BAD_SIGNATURE,
    FailedStep.SMOKE_CHECK: K.SMOKE_CHECK_FAILED,
    FailedStep.BACKUP: K.INSTALL_FAILED,
    FailedStep.INSTALL: K.INSTALL_FAILED,
    FailedStep.TRIAL: K.ROLLED_BACK,
    FailedStep.HANDOVER: K.ROLLED_BACK,
    FailedStep.INTERRUPTED: K.INTERRUPTED,
    FailedStep.RESTORE: K.ROLLBACK_FAILED,
}


def test_the_table_names_every_step() -> None:
    assert set(STEP_KINDS) == set(FailedStep)


@pytest.mark.parametrize(("step", "kind"), STEP_KINDS.items(), ids=[str(s) for s in STEP_KINDS])
def test_every_failed_step_maps_to_a_kind_and_keeps_its_text(
    step: FailedStep, kind: CommandFailureKind
) -> None:
    failure = UpdateFailure(step, f"the {step} step broke")
    assert failure_kind(failure) is kind
    assert failure_fields(failure) == {"error": f"the {step} step broke", "failure_kind": kind}


@pytest.mark.parametrize(
    ("step", "code", "kind"),
    [
        (FailedStep.BACKUP, errno.EROFS, K.READ_ONLY_PROGRAM),
        (FailedStep.BACKUP, errno.EACCES, K.READ_ONLY_PROGRAM),
        (FailedStep.BACKUP, errno.EPERM, K.READ_ONLY_PROGRAM),
        (FailedStep.INSTALL, errno.EROFS, K.READ_ONLY_PROGRAM),
        (FailedStep.BACKUP, errno.ENOSPC, K.INSTALL_FAILED),
        (FailedStep.INSTALL, errno.EXDEV, K.INSTALL_FAILED),
        # Not the program's file: a full data directory while downloading is a download failure.
        (FailedStep.DOWNLOAD, errno.EROFS, K.DOWNLOAD_FAILED),
        (FailedStep.RESTORE, errno.EROFS, K.ROLLBACK_FAILED),
    ],
)
def test_a_refused_rename_of_the_program_is_a_read_only_program(
    step: FailedStep, code: int, kind: CommandFailureKind
) -> None:
    assert failure_kind(UpdateFailure(step, "rename …", code)) is kind


def test_a_rolled_back_failure_keeps_its_kind_across_the_exec(tmp_path: Path) -> None:
    """The old build reports what the new one rolled back: "stopped during the trial" was an
    interruption, not a new build that failed its health check."""
    marker = new_marker(
        command_id="upd",
        rollout_id=None,
        old_version="0.8.0",
        new_version="0.9.0",
        program=tmp_path / "proxima-agent",
        backup=tmp_path / "proxima-agent.bak",
        health_timeout=5,
    ).with_(phase=Phase.ROLLED_BACK, error="stopped; restored", failed_step=FailedStep.INTERRUPTED)
    store = MarkerStore(tmp_path)
    store.write(marker)
    stored = store.read()
    assert stored == marker
    plan = plan_at_start(stored, version="0.8.0", concluded=False, now=0.0, backup_exists=False)
    assert plan.action is StartAction.REPORT and plan.failure is not None
    assert failure_kind(plan.failure) is K.INTERRUPTED
    # A step this build does not know (a newer build's marker) reads as a failed hand-over.
    raw = json.loads(store.path.read_text())
    store.path.write_text(json.dumps({**raw, "failed_step": "from_the_future"}))
    older = store.read()
    assert older is not None and older.failed_step is None
    plan = plan_at_start(older, version="0.8.0", concluded=False, now=0.0, backup_exists=False)
    assert plan.failure is not None and failure_kind(plan.failure) is K.ROLLED_BACK


# -- why self_update cannot work here ------------------------------------------------------


def test_each_blocker_is_its_own_kind(tmp_path: Path) -> None:
    program = tmp_path / "proxima-agent"
    program.write_bytes(b"")
    cases = {
        K.NOT_SELF_UPDATABLE: self_update_blocker(AgentType.K8S_NODE_MONITOR, program),
        K.NO_SIGNING_KEY: self_update_blocker(AgentType.HOST, program, signing_key=False),
        K.NOT_SINGLE_FILE_BUILD: self_update_blocker(AgentType.HOST, None),
    }
    for kind, blocker in cases.items():
        assert blocker is not None and blocker.kind is kind, blocker
    keyless = cases[K.NO_SIGNING_KEY]
    assert str(keyless) == "no signing public key configured: refusing to install unsigned builds"
    assert self_update_blocker(AgentType.HOST, program) is None
    # read_only_program: see test_a_read_only_program_path_reports_the_real_rename_error
    # (a read-only mount; root ignores file modes).


# -- the dispatcher and the ledger --------------------------------------------------------


async def test_the_dispatcher_and_the_ledger_send_their_kinds_over_nats(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    state = enrolled(nats_server, tmp_path)
    nats_server.allow(state.public_key, state.agent_id)
    nats_server.reload()
    # A command the previous process was running when it stopped.
    ledger = {
        "agent_id": state.agent_id,
        "entries": [
            {"command_id": "cut", "kind": "ping", "received_at": datetime.now(UTC).isoformat()}
        ],
    }
    (tmp_path / LEDGER_FILE).write_text(json.dumps(ledger))
    client = await nats_server.connect()
    results, beats = Inbox(), Inbox()
    await client.subscribe(subjects.command_result(state.agent_id), cb=results.handle)
    await client.subscribe(subjects.heartbeat(state.agent_id), cb=beats.handle)
    key = base64.urlsafe_b64encode(bytes(32)).decode()
    runtime = AgentRuntime(settings(tmp_path, signing_public_key=key))

    async def broken(command: Command) -> Outcome:
        raise RuntimeError("a bug")

    async with running(runtime):
        await await_for(lambda: ready(runtime) and beats.messages, what="agent ready")
        assert runtime.dispatcher is not None
        del runtime.dispatcher.handlers[CommandKind.PING]  # a kind this build cannot run
        runtime.dispatcher.handlers[CommandKind.ROTATE_CREDENTIALS] = broken
        await send_command(client, state.agent_id, "ping", "unknown")
        await send_command(client, state.agent_id, "rotate_credentials", "bug")
        await await_for(lambda: len(results.messages) >= 3, what="three results")
    await client.close()
    by_id = {m["command_id"]: m for m in results.messages}
    assert {c: (m["status"], m["error"], m["failure_kind"]) for c, m in by_id.items()} == {
        "cut": ("failed", "the agent restarted while the command was running", "interrupted"),
        "unknown": ("rejected", "ping not supported by this build", "unsupported_command"),
        "bug": ("failed", "internal error: RuntimeError", "internal_error"),
    }
    # Run with python -m, not from a single-file build: the heartbeat says so as a fact.
    assert beats.messages[-1]["can_self_update"] is False
    assert beats.messages[-1]["self_update_blocker"] == "not_single_file_build"
