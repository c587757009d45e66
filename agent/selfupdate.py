"""``self_update``: download a signed build, prove it runs, swap it in, and hand over to it.

Steps, each failing with the real error text (see ``docs/self-update.md``)::

    download     streamed, size-capped, into a temp file beside the program (or the data
                 directory when the program's directory is read-only)
    sha256       "sha256 mismatch: expected … got …"
    signature    "signature does not verify with the configured signing key"
    smoke check  ``<python> new version --json`` prints the expected version, in time
    backup       rename <program> → <program>.bak   ("backup current binary: rename …: …")
    install      rename temp → <program> (atomic)
    trial        the new build runs as a child in trial mode (no heartbeats, no commands, its own
                 health port) and must answer /readyz 200 within the health timeout; otherwise
                 it is killed and the backup renamed back
    handover     marker phase "handover", NATS drained, ``execv`` of the new program; the new
                 process reports the result once it is healthy (see :mod:`agent.handover`)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from agent.handover import (
    SELF_UPDATE_PROTOCOL,
    TRIAL_ENV,
    TRIAL_PORT_FILE,
    ExecRequest,
    MarkerStore,
    Phase,
    UpdateMarker,
    new_marker,
    program_argv,
)
from agent.httpclient import DownloadTooLargeError, HttpRequest, TransportError, UrllibTransport
from agent.program import FileOperationError, ProgramFiles, self_update_blocker
from agent.signatures import SigningPublicKey
from contracts.agent_types import AgentType
from contracts.durations import format_duration
from contracts.messages import Command, CommandStatus
from contracts.rollouts import ArtifactRef

__all__ = ["MAX_ARTIFACT_BYTES", "SelfUpdater", "UpdateFailedError", "UpdateOutcome"]

log = logging.getLogger(__name__)

MAX_ARTIFACT_BYTES = 512 * 2**20
_SMOKE_MIN_SECONDS = 15.0
_TRIAL_STOP_SECONDS = 5.0
_POLL = 0.05


class UpdateFailedError(Exception):
    """One step failed; ``text`` is what the result's ``error`` says."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass
class UpdateOutcome:
    """``status`` ``None`` means: hand over (``exec_request``); the new build reports."""

    status: CommandStatus | None
    error: str | None = None
    detail: dict[str, Any] | None = None
    exec_request: ExecRequest | None = None


def _stage_file(directory: Path, name: str) -> tuple[IO[bytes], Path]:
    fd, path = tempfile.mkstemp(prefix=f".{name}.new-", dir=directory)
    return os.fdopen(fd, "wb"), Path(path)


async def _readyz(port: int) -> bool:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 2)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    parts = line.split()
    return len(parts) >= 2 and parts[1] == b"200"


class SelfUpdater:
    """The ``self_update`` handler of one agent process."""

    def __init__(
        self,
        *,
        agent_type: AgentType,
        version: str,
        data_dir: Path,
        signing_key: SigningPublicKey | None,
        program: Path | None,
        health_timeout: float,
        files: ProgramFiles | None = None,
        download: Callable[..., Any] | None = None,
        max_bytes: int = MAX_ARTIFACT_BYTES,
    ) -> None:
        self.agent_type = agent_type
        self.version = version
        self.data_dir = data_dir
        self.signing_key = signing_key
        self.program = program
        self.health_timeout = health_timeout
        self.files = files or ProgramFiles()
        self.markers = MarkerStore(data_dir)
        self.max_bytes = max_bytes
        self._download = download or UrllibTransport().download

    # -- the command ----------------------------------------------------------------------

    async def run(self, command: Command) -> UpdateOutcome:
        blocker = self_update_blocker(
            self.agent_type, self.program, signing_key=self.signing_key is not None
        )
        if self.agent_type is not AgentType.HOST or self.signing_key is None or not self.program:
            return UpdateOutcome(CommandStatus.REJECTED, error=blocker)
        try:
            artifact = ArtifactRef.model_validate(
                {k: command.args.get(k) for k in ("version", "url", "sha256", "signature")}
            )
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, i['loc']))}: {i['msg']}"
                for i in e.errors(include_input=False, include_url=False)
            )
            return UpdateOutcome(
                CommandStatus.REJECTED, error=f"self_update needs a valid artifact: {problems}"
            )
        if not artifact.url.startswith(("http://", "https://")):
            return UpdateOutcome(
                CommandStatus.REJECTED, error="self_update downloads over http:// or https:// only"
            )
        detail = {"old_version": self.version, "target_version": artifact.version}
        if artifact.version == self.version:
            log.info("self_update: already running %s; nothing to do", self.version)
            return UpdateOutcome(
                CommandStatus.SUCCEEDED,
                detail={"old_version": self.version, "new_version": self.version},
            )
        running = self.markers.read()
        if running is not None:
            return UpdateOutcome(
                CommandStatus.REJECTED,
                error=f"another self_update (command {running.command_id}) is in progress",
            )
        rollout = command.args.get("rollout_id")
        _sweep_staged(self.program, self.data_dir)
        try:
            request = await self._update(
                command.command_id,
                rollout if isinstance(rollout, str) else None,
                artifact,
                self.program,
            )
        except UpdateFailedError as e:
            log.warning("self_update to %s failed: %s", artifact.version, e.text)
            return UpdateOutcome(CommandStatus.FAILED, error=e.text, detail=detail)
        return UpdateOutcome(None, exec_request=request)

    async def _update(
        self, command_id: str, rollout_id: str | None, artifact: ArtifactRef, program: Path
    ) -> ExecRequest:
        log.info(
            "self_update %s -> %s: downloading %s", self.version, artifact.version, artifact.url
        )
        started = time.monotonic()
        staged, digest = await self._fetch(artifact.url, program)
        try:
            self._verify(artifact, digest)
            await self._smoke_check(staged, artifact.version)
            log.info(
                "self_update: %s verified (sha256, signature, version) in %.1fs",
                artifact.version,
                time.monotonic() - started,
            )
            return await self._install_and_try(command_id, rollout_id, artifact, program, staged)
        finally:
            with contextlib.suppress(OSError):
                staged.unlink()

    async def _fetch(self, url: str, program: Path) -> tuple[Path, str]:
        """Download beside the program so the install is one rename on one filesystem; when
        that directory is read-only, into the data directory (the backup step then reports
        the read-only program path with the error operators look for)."""
        try:
            sink, staged = _stage_file(program.parent, program.name)
        except OSError as e:
            log.info("cannot stage beside %s (%s); staging in %s", program, e, self.data_dir)
            sink, staged = _stage_file(self.data_dir, program.name)
        digest = hashlib.sha256()
        request = HttpRequest(
            "GET",
            url,
            headers={"user-agent": f"proxima-agent/{self.version}"},
            timeout=60.0,
            follow_redirects=True,
        )
        try:
            with sink:
                response = await asyncio.to_thread(
                    self._download, request, sink, limit=self.max_bytes, on_chunk=digest.update
                )
                sink.flush()
                os.fsync(sink.fileno())
        except TransportError as e:
            staged.unlink(missing_ok=True)
            raise UpdateFailedError(f"download {url}: {e.detail}") from None
        except DownloadTooLargeError:
            staged.unlink(missing_ok=True)
            raise UpdateFailedError(
                f"download {url}: larger than {self.max_bytes // 2**20} MiB"
            ) from None
        except OSError as e:
            staged.unlink(missing_ok=True)
            raise UpdateFailedError(f"download {url}: write {staged}: {e.strerror or e}") from None
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        if response.status != 200:
            staged.unlink(missing_ok=True)
            reason = f" {response.reason}" if response.reason else ""
            raise UpdateFailedError(f"download {url}: HTTP {response.status}{reason}")
        _copy_mode(program, staged)
        return staged, digest.hexdigest()

    def _verify(self, artifact: ArtifactRef, digest: str) -> None:
        if digest != artifact.sha256:
            raise UpdateFailedError(f"sha256 mismatch: expected {artifact.sha256} got {digest}")
        assert self.signing_key is not None  # checked before downloading
        if not self.signing_key.verifies(bytes.fromhex(digest), artifact.signature):
            raise UpdateFailedError("signature does not verify with the configured signing key")

    async def _smoke_check(self, staged: Path, expected: str) -> None:
        timeout = max(self.health_timeout, _SMOKE_MIN_SECONDS)
        env = {k: v for k, v in os.environ.items() if k != TRIAL_ENV}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(staged),
            "version",
            "--json",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise UpdateFailedError(
                f"new build {expected} did not answer 'version' within {format_duration(timeout)}"
            ) from None
        if proc.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
            raise UpdateFailedError(
                f"new build {expected} exited with code {proc.returncode} on 'version'"
                + (f": {last}" if last else "")
            )
        try:
            answer = json.loads(out)
            reported, protocol = str(answer["version"]), int(answer.get("self_update_protocol", 0))
        except (ValueError, KeyError, TypeError):
            raise UpdateFailedError(
                f"new build {expected} did not print its version as JSON"
            ) from None
        if reported != expected:
            raise UpdateFailedError(f"new build reports version {reported}, expected {expected}")
        if protocol < SELF_UPDATE_PROTOCOL:
            raise UpdateFailedError(
                f"new build {expected} cannot take over a self_update "
                f"(protocol {protocol}, need {SELF_UPDATE_PROTOCOL})"
            )

    async def _install_and_try(
        self,
        command_id: str,
        rollout_id: str | None,
        artifact: ArtifactRef,
        program: Path,
        staged: Path,
    ) -> ExecRequest:
        backup = program.with_name(program.name + ".bak")
        marker = new_marker(
            command_id=command_id,
            rollout_id=rollout_id,
            old_version=self.version,
            new_version=artifact.version,
            program=program,
            backup=backup,
            health_timeout=self.health_timeout,
        )
        self.markers.write(marker)
        try:
            self.files.rename(program, backup)
        except FileOperationError as e:
            self.markers.remove()
            raise UpdateFailedError(f"backup current binary: {e}") from None
        try:
            self._place(staged, program)
        except FileOperationError as e:
            restored = self._restore(marker)
            self.markers.remove()
            raise UpdateFailedError(f"install new binary: {e}{restored}") from None
        except BaseException:
            self._restore(marker)
            self.markers.remove()
            raise
        self.files.sync_dir(program.parent)
        try:
            problem = await self._trial(program, artifact.version)
        except BaseException:
            # Cancelled (the agent is stopping): leave the old build in place.
            self._restore(marker)
            self.markers.remove()
            raise
        if problem is not None:
            restored = self._restore(marker)
            self.markers.remove()
            raise UpdateFailedError(problem + (restored or f"; restored {self.version}"))
        handover = marker.with_(phase=Phase.HANDOVER, deadline=time.time() + self.health_timeout)
        self.markers.write(handover)
        log.info(
            "self_update: %s passed its trial; handing over (healthy within %s or %s comes back)",
            artifact.version,
            format_duration(self.health_timeout),
            self.version,
        )
        return ExecRequest(program_argv(program), f"handing over to {artifact.version}")

    def _place(self, staged: Path, program: Path) -> None:
        if staged.parent == program.parent:
            self.files.replace(staged, program)
            return
        # Staged elsewhere (the program's directory was read-only and no longer is):
        # copy beside the program first so the final step is still one atomic rename.
        try:
            sink, beside = _stage_file(program.parent, program.name)
        except OSError as e:
            raise FileOperationError("open", (program.parent,), e) from None
        try:
            with sink, open(staged, "rb") as source:
                while chunk := source.read(1024 * 1024):
                    sink.write(chunk)
                sink.flush()
                os.fsync(sink.fileno())
            os.chmod(beside, staged.stat().st_mode & 0o7777)
            self.files.replace(beside, program)
        except BaseException:
            beside.unlink(missing_ok=True)
            raise

    def _restore(self, marker: UpdateMarker) -> str:
        """Rename the backup back; ``""`` on success, else the text to append to the error."""
        try:
            self.files.replace(marker.backup, marker.program)
        except FileOperationError as e:
            log.error("restoring %s failed: %s", marker.old_version, e)
            return f"; restoring {marker.old_version} failed: {e}"
        self.files.sync_dir(marker.program.parent)
        log.info("restored %s at %s", marker.old_version, marker.program)
        return ""

    # -- the trial ------------------------------------------------------------------------

    async def _trial(self, program: Path, version: str) -> str | None:
        """Run the installed build as a trial child; ``None`` when it became healthy in time,
        else the error text (without the "restored" part)."""
        port_file = self.data_dir / TRIAL_PORT_FILE
        port_file.unlink(missing_ok=True)
        env = dict(os.environ)
        env[TRIAL_ENV] = f"{os.getpid()}:{self.health_timeout + 30:g}"
        timeout = self.health_timeout
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *program_argv(program),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        last_lines: list[str] = []
        relay = asyncio.create_task(self._relay(proc, last_lines))
        try:
            deadline = started + timeout
            while True:
                if proc.returncode is not None:
                    await asyncio.wait_for(relay, 2)
                    last = last_lines[-1] if last_lines else ""
                    return (
                        f"new version {version} exited with code {proc.returncode} before it "
                        "became healthy" + (f" ({last})" if last else "")
                    )
                port = _read_port(port_file)
                if port is not None and await _readyz(port):
                    log.info(
                        "self_update: trial of %s healthy after %.1fs",
                        version,
                        time.monotonic() - started,
                    )
                    return None
                if time.monotonic() >= deadline:
                    return (
                        f"new version {version} did not become healthy within "
                        f"{format_duration(timeout)}"
                    )
                await asyncio.sleep(_POLL)
        finally:
            await self._stop_trial(proc)
            relay.cancel()
            with contextlib.suppress(BaseException):
                await relay
            port_file.unlink(missing_ok=True)

    @staticmethod
    async def _relay(proc: asyncio.subprocess.Process, last_lines: list[str]) -> None:
        """The trial's log goes to ours (operators see why it failed); keep the last lines."""
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            sys.stderr.write(text + "\n")
            last_lines.append(text)
            del last_lines[:-5]

    @staticmethod
    async def _stop_trial(proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), _TRIAL_STOP_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def _sweep_staged(program: Path, data_dir: Path, older_than: float = 3600.0) -> None:
    """Temp files of downloads cut short by a crash (old enough not to be another agent's)."""
    now = time.time()
    for directory in (program.parent, data_dir):
        try:
            leftovers = list(directory.glob(f".{program.name}.new-*"))
        except OSError:
            continue
        for path in leftovers:
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > older_than:
                    path.unlink()
                    log.info("removed %s, left by an interrupted self_update", path)


def _copy_mode(program: Path, staged: Path) -> None:
    """The new program gets the old one's permission bits (0755 when there is none)."""
    try:
        mode = program.stat().st_mode & 0o7777
    except OSError:
        mode = 0o755
    with contextlib.suppress(OSError):
        os.chmod(staged, mode)


def _read_port(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
