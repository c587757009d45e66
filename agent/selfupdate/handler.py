"""The ``self_update`` command: check it, then download → verify → install → trial → hand over.

A result now (rejected, failed, nothing to do), or a hand-over: the runtime stops and execs the
new build, which reports the result once it is healthy (:mod:`agent.selfupdate.probation`).
Loaded on the first ``self_update`` (:mod:`agent.selfupdate.feature`), before the program file
is touched: once the zipapp on disk is swapped, this process must not import from it again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.httpclient import UrllibTransport
from agent.selfupdate.download import MAX_ARTIFACT_BYTES, fetch, smoke_check, sweep_staged, verify
from agent.selfupdate.failures import FailedStep, UpdateFailedError, UpdateFailure
from agent.selfupdate.handover import ExecRequest, hand_over
from agent.selfupdate.install import install, restore
from agent.selfupdate.marker import MarkerStore, UpdateMarker, new_marker
from agent.selfupdate.program import ProgramFiles, self_update_blocker
from agent.selfupdate.signatures import SigningPublicKey
from agent.selfupdate.trial import run_trial
from contracts.messages import Command, CommandStatus
from contracts.rollouts import ArtifactRef, artifact_url_allowed
from contracts.vocabulary import AgentType
from contracts.vocabulary.commands import CommandFailureKind

__all__ = ["MAX_ARTIFACT_BYTES", "SelfUpdater", "UpdateOutcome"]

log = logging.getLogger(__name__)


@dataclass
class UpdateOutcome:
    """``status`` ``None`` means: hand over (``exec_request``); the new build reports. A
    rejection says why in ``error`` and ``failure_kind``; a failed step in ``failure``."""

    status: CommandStatus | None
    error: str | None = None
    failure_kind: CommandFailureKind | None = None
    detail: dict[str, Any] | None = None
    exec_request: ExecRequest | None = None
    failure: UpdateFailure | None = None


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
        sources: Callable[[], list[str]] | None = None,
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
        # URL prefixes downloads may come from (None: any, for tests of the steps alone)
        self._sources = sources
        self._download = download or UrllibTransport().download

    async def run(self, command: Command) -> UpdateOutcome:
        blocker = self_update_blocker(
            self.agent_type, self.program, signing_key=self.signing_key is not None
        )
        if self.agent_type is not AgentType.HOST or self.signing_key is None or not self.program:
            # A writable program is not checked here: the backup's rename says what refused it.
            assert blocker is not None
            return _rejected(blocker.text, blocker.kind)
        artifact = _artifact(command)
        if isinstance(artifact, str):
            return _rejected(artifact, CommandFailureKind.BAD_ARGUMENTS)
        detail = {"old_version": self.version, "target_version": artifact.version}
        if self._sources is not None and not artifact_url_allowed(artifact.url, self._sources()):
            return _rejected(
                f"refusing to download {artifact.url[:200]}: not the Console's "
                "/api/v1/artifacts/ nor under PROXIMA_ARTIFACT_URL_ALLOW",
                CommandFailureKind.ARTIFACT_SOURCE_REFUSED,
            )
        if artifact.version == self.version:
            log.info("self_update: already running %s; nothing to do", self.version)
            return UpdateOutcome(
                CommandStatus.SUCCEEDED,
                detail={"old_version": self.version, "new_version": self.version},
            )
        running = self.markers.read()
        if running is not None:
            return _rejected(
                f"another self_update (command {running.command_id}) is in progress",
                CommandFailureKind.UPDATE_IN_PROGRESS,
            )
        rollout = command.args.get("rollout_id")
        sweep_staged(self.program, self.data_dir)
        try:
            request = await self._update(
                command.command_id,
                rollout if isinstance(rollout, str) else None,
                artifact,
                self.program,
                self.signing_key,
            )
        except UpdateFailedError as e:
            log.warning("self_update to %s failed: %s", artifact.version, e.text)
            return UpdateOutcome(
                CommandStatus.FAILED, error=e.text, detail=detail, failure=e.failure
            )
        return UpdateOutcome(None, exec_request=request)

    async def _update(
        self,
        command_id: str,
        rollout_id: str | None,
        artifact: ArtifactRef,
        program: Path,
        key: SigningPublicKey,
    ) -> ExecRequest:
        log.info(
            "self_update %s -> %s: downloading %s", self.version, artifact.version, artifact.url
        )
        started = time.monotonic()
        staged, digest = await fetch(
            artifact.url,
            program,
            data_dir=self.data_dir,
            version=self.version,
            download=self._download,
            max_bytes=self.max_bytes,
        )
        try:
            verify(artifact, digest, key)
            await smoke_check(staged, artifact.version, health_timeout=self.health_timeout)
            log.info(
                "self_update: %s verified (sha256, signature, version) in %.1fs",
                artifact.version,
                time.monotonic() - started,
            )
            marker = new_marker(
                command_id=command_id,
                rollout_id=rollout_id,
                old_version=self.version,
                new_version=artifact.version,
                program=program,
                backup=program.with_name(program.name + ".bak"),
                health_timeout=self.health_timeout,
            )
            install(marker, staged, markers=self.markers, files=self.files)
            await self._try(marker)
            return hand_over(marker, self.markers)
        finally:
            with contextlib.suppress(OSError):
                staged.unlink()

    async def _try(self, marker: UpdateMarker) -> None:
        """The installed build's trial; when it fails, the old build is put back."""
        try:
            problem = await run_trial(
                marker.program,
                marker.new_version,
                data_dir=self.data_dir,
                health_timeout=self.health_timeout,
            )
        except BaseException:
            # Cancelled (the agent is stopping): leave the old build in place.
            restore(marker, self.files)
            self.markers.remove()
            raise
        if problem is not None:
            restored = restore(marker, self.files)
            self.markers.remove()
            text = problem + (restored or f"; restored {self.version}")
            step = FailedStep.RESTORE if restored else FailedStep.TRIAL
            raise UpdateFailedError(UpdateFailure(step, text))


def _rejected(error: str, kind: CommandFailureKind) -> UpdateOutcome:
    return UpdateOutcome(CommandStatus.REJECTED, error=error, failure_kind=kind)


def _artifact(command: Command) -> ArtifactRef | str:
    """The command's artifact reference, or why it is refused."""
    try:
        artifact = ArtifactRef.model_validate(
            {k: command.args.get(k) for k in ("version", "url", "sha256", "signature")}
        )
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, i['loc']))}: {i['msg']}"
            for i in e.errors(include_input=False, include_url=False)
        )
        return f"self_update needs a valid artifact: {problems}"
    if not artifact.url.startswith(("http://", "https://")):
        return "self_update downloads over http:// or https:// only"
    return artifact
