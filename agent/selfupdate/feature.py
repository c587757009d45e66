"""What an agent process holds of ``self_update``: whether it can, what it settles at start, the
command handler, and the probation watch after a hand-over.

:class:`AgentRuntime <agent.runtime.AgentRuntime>` owns the lifecycle and asks this for the
rest. The handler's updater (:mod:`agent.selfupdate.handler`: download, trial, install) is
imported on the first ``self_update`` only: most agents never update, and its imports cost
resident memory. It is loaded before the program file is touched, which matters: once the
zipapp on disk is swapped, this process must not import from it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from agent.commands import CommandDispatcher, Handler, Outcome
from agent.health import Readiness
from agent.ledger import CommandLedger
from agent.selfupdate.failures import failure_fields
from agent.selfupdate.handover import ExecRequest
from agent.selfupdate.marker import MarkerStore
from agent.selfupdate.probation import Probation, settle_at_start, watch
from agent.selfupdate.program import ProgramFiles, running_program, self_update_blocker
from agent.selfupdate.signatures import load_signing_key
from agent.settings import AgentSettings
from contracts.messages import Command
from contracts.vocabulary.commands import CommandFailureKind

if TYPE_CHECKING:
    from agent.selfupdate.handler import SelfUpdater

__all__ = ["SelfUpdateFeature"]

log = logging.getLogger(__name__)


class SelfUpdateFeature:
    """``self_update`` for one agent process; a signing key that is set but unusable raises
    :class:`~agent.errors.ConfigError` here, at start."""

    def __init__(
        self, settings: AgentSettings, *, version: str, files: ProgramFiles | None = None
    ) -> None:
        self.settings = settings
        self.version = version
        self.signing_key = load_signing_key(
            settings.signing_public_key, settings.signing_public_key_file
        )
        self.program = settings.program_path or running_program()
        self.blocker = self_update_blocker(
            settings.agent_type, self.program, signing_key=self.signing_key is not None
        )
        self.files = files or ProgramFiles()
        self.markers = MarkerStore(settings.data_dir)
        self._probation: Probation | None = None
        self._updater: SelfUpdater | None = None
        # The Console this agent is enrolled with: its /api/v1/artifacts/ is a trusted source.
        self.console_url: str | None = settings.backend_url

    def sources(self) -> list[str]:
        """URL prefixes a build may be downloaded from: the Console's own artifacts and the
        operator's PROXIMA_ARTIFACT_URL_ALLOW."""
        # Here, not at the top: contracts.rollouts builds the Console's rollout models, which an
        # idle agent never uses (~0.5 MiB resident). The updater, the only caller, has imported
        # it already (agent.selfupdate.handler), so this never reads a swapped zipapp.
        from contracts.rollouts import HOSTED_ARTIFACTS_PATH

        own = [f"{self.console_url.rstrip('/')}{HOSTED_ARTIFACTS_PATH}"] if self.console_url else []
        return [*own, *self.settings.artifact_url_allow]

    @property
    def possible(self) -> bool:
        return self.blocker is None

    @property
    def blocker_kind(self) -> CommandFailureKind | None:
        """Why not, as the fact every heartbeat carries; ``None`` when it can."""
        return self.blocker.kind if self.blocker is not None else None

    def settle(self, ledger: CommandLedger) -> ExecRequest | None:
        """Load ``ledger``, settling what the previous build left; the build to exec now, if
        any (this one is not to serve)."""
        request, self._probation = settle_at_start(
            ledger, version=self.version, markers=self.markers, files=self.files
        )
        return request

    def handler(self, hand_over: Callable[[ExecRequest], None]) -> Handler:
        """``self_update``: a result now (rejected, failed, nothing to do), or a hand-over."""

        async def self_update(command: Command) -> Outcome:
            outcome = await self.updater().run(command)
            if outcome.status is None:
                request = outcome.exec_request
                assert request is not None
                return Outcome(None, after=lambda: hand_over(request))
            if outcome.failure is not None:
                fields = failure_fields(outcome.failure)
                return Outcome(outcome.status, detail=outcome.detail or {}, **fields)
            return Outcome(
                outcome.status,
                error=outcome.error,
                failure_kind=outcome.failure_kind,
                detail=outcome.detail or {},
            )

        return self_update

    def updater(self) -> SelfUpdater:
        if self._updater is None:
            from agent.selfupdate.handler import SelfUpdater

            s = self.settings
            self._updater = SelfUpdater(
                agent_type=s.agent_type,
                version=self.version,
                data_dir=s.data_dir,
                signing_key=self.signing_key,
                program=self.program,
                health_timeout=s.update_health_timeout,
                files=self.files,
                max_bytes=s.max_artifact_bytes,
                sources=self.sources,
            )
        return self._updater

    def probation_watch(
        self,
        readiness: Readiness,
        dispatcher: CommandDispatcher,
        hand_over: Callable[[ExecRequest], None],
    ) -> Coroutine[Any, Any, None] | None:
        """The watch over this build's probation after a hand-over, or ``None`` (no probation)."""
        if self._probation is None:
            return None
        return watch(
            self._probation,
            readiness=readiness,
            dispatcher=dispatcher,
            markers=self.markers,
            files=self.files,
            hand_over=hand_over,
        )
