"""The parts of self_update that need no agent process: the updater in-process against real
files and a real HTTP server, the marker's start-up decisions, errors, keys and downloads."""

from __future__ import annotations

import errno
import io
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.httpclient import DownloadTooLargeError, HttpRequest, UrllibTransport
from agent.selfupdate.failures import FailedStep, failure_kind
from agent.selfupdate.handler import SelfUpdater
from agent.selfupdate.marker import MarkerStore, Phase, UpdateMarker, new_marker
from agent.selfupdate.probation import StartDecision, decide_at_start
from agent.selfupdate.program import FileOperationError, ProgramFiles, go_strerror
from agent.selfupdate.signatures import SigningPublicKey, load_signing_key
from contracts.messages import Command, CommandFailureKind, CommandKind, CommandStatus
from contracts.vocabulary import AgentType
from testkit.builds import ArtifactServer, Builds


def command(args: dict[str, object], command_id: str = "cmd-1") -> Command:
    return Command(
        command_id=command_id,
        kind=CommandKind.SELF_UPDATE,
        issued_at=datetime.now(UTC),
        args=args,
    )


def updater(
    tmp_path: Path,
    builds: Builds,
    *,
    files: ProgramFiles | None = None,
    agent_type: AgentType = AgentType.HOST,
    key: bool = True,
    program: Path | None = None,
) -> SelfUpdater:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    target = bin_dir / "proxima-agent"
    shutil.copy2(builds.old.path, target)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return SelfUpdater(
        agent_type=agent_type,
        version="0.8.0",
        data_dir=data,
        signing_key=SigningPublicKey.parse(builds.public_key) if key else None,
        program=program if program is not None else target,
        health_timeout=3.0,
        files=files,
    )


# -- the filesystem seam --------------------------------------------------------------------


async def test_the_rename_failure_seam_gives_the_go_agents_text(
    tmp_path: Path, builds: Builds, artifacts: ArtifactServer
) -> None:
    """Where no read-only mount can be made, the failure is injected at ProgramFiles: the
    updater's real steps run (download, checks, smoke test) and only the rename fails."""
    erofs = updater(tmp_path, builds, files=ProgramFiles(fail={"rename": errno.EROFS}))
    outcome = await erofs.run(command(builds.new.artifact(artifacts.url)))
    program = erofs.program
    assert outcome.status is CommandStatus.FAILED
    assert outcome.error == (
        f"backup current binary: rename {program} {program}.bak: read-only file system"
    )
    assert outcome.failure is not None and outcome.failure.step is FailedStep.BACKUP
    assert failure_kind(outcome.failure) is CommandFailureKind.READ_ONLY_PROGRAM
    assert program is not None and program.read_bytes() == builds.old.path.read_bytes()
    assert sorted(p.name for p in program.parent.iterdir()) == ["proxima-agent"]
    assert not (tmp_path / "data" / "update.json").exists()


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
        (errno.EXDEV, "invalid cross-device link"),
        (errno.ENOSPC, "no space left on device"),
        (errno.ETXTBSY, "text file busy"),
        (errno.ENOTEMPTY, "directory not empty"),
    ],
)
def test_errors_read_like_the_go_agent(code: int, text: str) -> None:
    assert go_strerror(OSError(code, os.strerror(code))) == text


def test_a_real_failed_rename_names_both_paths(tmp_path: Path) -> None:
    with pytest.raises(FileOperationError) as caught:
        ProgramFiles().rename(tmp_path / "missing", tmp_path / "missing.bak")
    assert str(caught.value) == (
        f"rename {tmp_path}/missing {tmp_path}/missing.bak: no such file or directory"
    )


# -- refusals that need no download ---------------------------------------------------------


async def test_kubernetes_agents_and_agents_without_a_key_refuse(
    tmp_path: Path, builds: Builds, artifacts: ArtifactServer
) -> None:
    args = builds.new.artifact(artifacts.url)
    node = await updater(tmp_path, builds, agent_type=AgentType.K8S_NODE_MONITOR).run(command(args))
    assert node.status is CommandStatus.REJECTED
    assert node.error == "k8s-node-monitor agents are upgraded by helm upgrade, not self_update"
    assert node.failure_kind is CommandFailureKind.NOT_SELF_UPDATABLE
    keyless = await updater(tmp_path, builds, key=False).run(command(args))
    assert keyless.status is CommandStatus.REJECTED
    assert keyless.error == "no signing public key configured: refusing to install unsigned builds"
    assert keyless.failure_kind is CommandFailureKind.NO_SIGNING_KEY
    bad = await updater(tmp_path, builds).run(command({"version": "0.9.0"}))
    assert bad.status is CommandStatus.REJECTED
    assert bad.error is not None and bad.error.startswith("self_update needs a valid artifact")
    assert bad.failure_kind is CommandFailureKind.BAD_ARGUMENTS
    same = await updater(tmp_path, builds).run(command(builds.old.artifact(artifacts.url)))
    assert same.status is CommandStatus.SUCCEEDED
    assert same.detail == {"old_version": "0.8.0", "new_version": "0.8.0"}
    assert artifacts.downloads == []


async def test_an_update_in_flight_refuses_a_second_one(
    tmp_path: Path, builds: Builds, artifacts: ArtifactServer
) -> None:
    first = updater(tmp_path, builds)
    assert first.program is not None
    marker = new_marker(
        command_id="earlier",
        rollout_id=None,
        old_version="0.8.0",
        new_version="0.9.0",
        program=first.program,
        backup=first.program.with_name("proxima-agent.bak"),
        health_timeout=3,
    )
    MarkerStore(tmp_path / "data").write(marker)
    outcome = await first.run(command(builds.new.artifact(artifacts.url)))
    assert outcome.status is CommandStatus.REJECTED
    assert outcome.error == "another self_update (command earlier) is in progress"
    assert outcome.failure_kind is CommandFailureKind.UPDATE_IN_PROGRESS


# -- decisions at start ---------------------------------------------------------------------


def marker_in(tmp_path: Path, phase: Phase, **changes: object) -> tuple[UpdateMarker, Path]:
    program = tmp_path / "proxima-agent"
    backup = tmp_path / "proxima-agent.bak"
    program.write_text("new build")
    backup.write_text("old build")
    marker = new_marker(
        command_id="upd",
        rollout_id="ro",
        old_version="0.8.0",
        new_version="0.9.0",
        program=program,
        backup=backup,
        health_timeout=5,
    ).with_(phase=phase, **changes)
    return marker, program


def decide(
    tmp_path: Path, marker: UpdateMarker, version: str, *, concluded: bool = False
) -> StartDecision:
    store = MarkerStore(tmp_path)
    store.write(marker)
    return decide_at_start(
        marker, version=version, concluded=concluded, store=store, files=ProgramFiles(), now=1000.0
    )


def test_new_build_within_its_deadline_is_on_probation(tmp_path: Path) -> None:
    marker, _ = marker_in(tmp_path, Phase.HANDOVER, deadline=1004.0)
    decision = decide(tmp_path, marker, "0.9.0")
    assert decision.probation_seconds == pytest.approx(4.0)
    stored = MarkerStore(tmp_path).read()
    assert stored is not None and stored.attempts == 1


def test_new_build_past_its_deadline_restores_the_old_one(tmp_path: Path) -> None:
    marker, program = marker_in(tmp_path, Phase.HANDOVER, deadline=999.0)
    decision = decide(tmp_path, marker, "0.9.0")
    assert decision.exec_request is not None
    assert program.read_text() == "old build"
    stored = MarkerStore(tmp_path).read()
    assert stored is not None and stored.phase is Phase.ROLLED_BACK
    assert stored.error == "new version 0.9.0 did not become healthy within 5s; restored 0.8.0"


def test_new_build_started_twice_is_a_crash_and_restores_the_old_one(tmp_path: Path) -> None:
    marker, program = marker_in(tmp_path, Phase.HANDOVER, deadline=1010.0, attempts=1)
    decision = decide(tmp_path, marker, "0.9.0")
    assert decision.exec_request is not None
    assert program.read_text() == "old build"
    stored = MarkerStore(tmp_path).read()
    assert stored is not None and "crashed or was restarted" in (stored.error or "")


def test_old_build_after_a_rollback_reports_the_error(tmp_path: Path) -> None:
    marker, _ = marker_in(tmp_path, Phase.ROLLED_BACK, error="it broke; restored 0.8.0")
    decision = decide(tmp_path, marker, "0.8.0")
    assert decision.failure is not None and decision.failure.text == "it broke; restored 0.8.0"
    assert decision.remove_marker


def test_a_stop_during_the_trial_restores_the_old_build(tmp_path: Path) -> None:
    marker, program = marker_in(tmp_path, Phase.INSTALLING)
    decision = decide(tmp_path, marker, "0.9.0")
    assert decision.exec_request is not None
    assert program.read_text() == "old build"


def test_a_recorded_result_only_needs_the_cleanup(tmp_path: Path) -> None:
    marker, _ = marker_in(tmp_path, Phase.HANDOVER, deadline=0.0, attempts=5)
    decision = decide(tmp_path, marker, "0.9.0", concluded=True)
    assert decision.exec_request is None
    assert decision.remove_marker and decision.remove_backup


def test_a_corrupt_marker_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / "update.json").write_text('{"phase": "nonsense"}')
    assert MarkerStore(tmp_path).read() is None
    assert [p.name[:20] for p in tmp_path.iterdir()] == ["update.json.corrupt-"]


def test_the_marker_round_trips(tmp_path: Path) -> None:
    marker, _ = marker_in(tmp_path, Phase.HANDOVER, deadline=12.5, attempts=1, error=None)
    store = MarkerStore(tmp_path)
    store.write(marker)
    assert store.read() == marker


# -- keys and downloads ---------------------------------------------------------------------


def test_signing_keys_are_checked_at_startup(tmp_path: Path, builds: Builds) -> None:
    assert load_signing_key(None, None) is None
    key = load_signing_key(builds.public_key, None)
    assert key is not None and key.text == builds.public_key
    pub = builds.key.with_suffix(".pub")
    from_file = load_signing_key(None, pub)
    assert from_file == key
    with pytest.raises(ConfigError, match="32 bytes"):
        load_signing_key("c2hvcnQ", None)
    with pytest.raises(ConfigError, match=r"PROXIMA_SIGNING_PUBLIC_KEY_FILE: cannot read"):
        load_signing_key(None, tmp_path / "missing.pub")
    digest = bytes.fromhex(builds.new.sha256)
    assert builds.new.signature is not None
    assert key.verifies(digest, builds.new.signature)
    assert not key.verifies(digest, "not base64!")
    assert not key.verifies(bytes(32), builds.new.signature)


def test_downloads_are_capped(builds: Builds, artifacts: ArtifactServer) -> None:
    transport = UrllibTransport()
    request = HttpRequest("GET", f"{artifacts.url}/{builds.new.path.name}")
    with pytest.raises(DownloadTooLargeError):
        transport.download(request, io.BytesIO(), limit=1024)
    sink = io.BytesIO()
    response = transport.download(request, sink, limit=10 * 2**20)
    assert response.status == 200
    assert sink.getvalue() == builds.new.path.read_bytes()


def test_downloads_follow_redirects_and_console_calls_do_not(
    builds: Builds, artifacts: ArtifactServer
) -> None:
    """A package registry answers a download with a redirect to its object store; the
    Console's API answering with one is an answer, not something to follow."""
    artifacts.redirects["/moved.pyz"] = f"{artifacts.url}/{builds.new.path.name}"
    transport = UrllibTransport()
    sink = io.BytesIO()
    request = HttpRequest("GET", f"{artifacts.url}/moved.pyz", follow_redirects=True)
    assert transport.download(request, sink, limit=10 * 2**20).status == 200
    assert sink.getvalue() == builds.new.path.read_bytes()
    api = transport(HttpRequest("GET", f"{artifacts.url}/moved.pyz"))
    assert api.status == 302


# -- the swap leaves a runnable program at every instant --------------------------------------

_KILLED_INSTALL = """
import os, signal, sys
from pathlib import Path
from agent.selfupdate import install as install_module
from agent.selfupdate.marker import MarkerStore, new_marker
from agent.selfupdate.program import ProgramFiles

program, staged, data = (Path(p) for p in sys.argv[1:4])

class KilledBeforeInstall(ProgramFiles):
    def replace(self, src, dst):
        if dst == program:  # the install rename: die first, like a SIGKILL between the steps
            os.kill(os.getpid(), signal.SIGKILL)
        super().replace(src, dst)

marker = new_marker(
    command_id="upd", rollout_id="ro", old_version="0.8.0", new_version="0.9.0",
    program=program, backup=program.with_name(program.name + ".bak"), health_timeout=5,
)
install_module.install(marker, staged, markers=MarkerStore(data), files=KilledBeforeInstall())
"""


def test_a_kill_between_backup_and_install_leaves_the_old_program_runnable(
    tmp_path: Path, builds: Builds
) -> None:
    """Broke: the backup was a rename, so a kill in the 72 µs before the install rename left no
    program file and the next start failed with ENOENT. The backup is now a hard link."""
    import subprocess
    import sys

    bin_dir, data = tmp_path / "bin", tmp_path / "data"
    bin_dir.mkdir()
    data.mkdir()
    program = bin_dir / "proxima-agent"
    shutil.copy2(builds.old.path, program)
    staged = bin_dir / ".proxima-agent.staged"
    shutil.copy2(builds.new.path, staged)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_INSTALL, str(program), str(staged), str(data)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -9, killed.stderr.decode()
    assert program.read_bytes() == builds.old.path.read_bytes()
    assert os.access(program, os.X_OK)
    version = subprocess.run(
        [sys.executable, str(program), "version", "--json"], capture_output=True, timeout=60
    )
    assert version.returncode == 0, version.stderr.decode()
    assert (bin_dir / "proxima-agent.bak").read_bytes() == builds.old.path.read_bytes()
    # The next start settles the marker the kill left (phase installing) as before.
    marker = MarkerStore(data).read()
    assert marker is not None and marker.phase is Phase.INSTALLING
    decision = decide_at_start(
        marker, version="0.8.0", concluded=False, store=MarkerStore(data), files=ProgramFiles()
    )
    assert decision.exec_request is not None or decision.failure is not None
    assert program.read_bytes() == builds.old.path.read_bytes()


def test_a_missing_program_is_restored_from_its_backup_at_start(tmp_path: Path) -> None:
    """What an older build's install could leave (killed between its two renames): the next
    start gives the program's path its backup back before deciding anything."""
    from agent.ledger import CommandLedger
    from agent.selfupdate.probation import settle_at_start

    marker, program = marker_in(tmp_path, Phase.INSTALLING)
    program.unlink()
    store = MarkerStore(tmp_path)
    store.write(marker)
    ledger = CommandLedger(tmp_path, "agent-1")
    exec_request, _probation = settle_at_start(
        ledger, version="0.8.0", markers=store, files=ProgramFiles()
    )
    assert program.read_text() == "old build"
    assert exec_request is not None or ledger.undelivered()
