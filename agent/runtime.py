"""The agent process: load or enroll the identity, serve health, keep NATS, run the loops.

:class:`AgentRuntime` takes settings and (for tests) an HTTP transport and a collector factory;
:meth:`AgentRuntime.run` returns when :meth:`AgentRuntime.stop` is called, SIGTERM/SIGINT arrive,
or the process is to be replaced: then :attr:`AgentRuntime.exec_request` says by what (the new
build of a ``self_update``, or the old one coming back), and the CLI execs it.

The runtime owns the lifecycle only; ``self_update`` (what it settles at start, its command and
the probation after a hand-over) is :class:`~agent.selfupdate.feature.SelfUpdateFeature`'s.
A build under trial runs :class:`~agent.selfupdate.trial.TrialChild` instead of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import __version__
from agent.backend import BackendClient
from agent.collector_factory import CollectorFactory, default_collectors
from agent.collectors import Collector, collector_loop, heartbeat_fields
from agent.commands import CommandDispatcher, CredentialRotation, ping_handler
from agent.delivery import ResultDelivery
from agent.enrollment import Enroller, EnrollmentConfig, InstallToken
from agent.errors import (
    BackendAnswerError,
    BackendError,
    ConfigError,
    EnvironmentProblemError,
    IdentityRetiredError,
)
from agent.files import ensure_private_dir
from agent.health import HealthServer, Readiness
from agent.heartbeat import HeartbeatInfo, heartbeat_loop
from agent.host_metrics import use_host_procfs
from agent.kube_events import PodEvents, events_config
from agent.ledger import CommandLedger
from agent.selfupdate.feature import SelfUpdateFeature
from agent.selfupdate.handover import ExecRequest
from agent.session import NatsSession, ReconnectPolicy
from agent.settings import AgentSettings, setting_label
from agent.state import AgentState, StateStore
from contracts.backoff import Backoff
from contracts.durations import format_duration
from contracts.messages import CommandKind
from contracts.vocabulary import ErrorReason

if TYPE_CHECKING:
    from agent.httpclient import Transport
    from agent.selfupdate.program import ProgramFiles

__all__ = ["AgentRuntime"]

log = logging.getLogger(__name__)

# The Console's answers that mean "this key is not the identity's key any more": a fresh JWT
# will never come, and connecting again is pointless (see ``NatsSession._retire``).
_RETIRED_REASONS = frozenset({str(ErrorReason.IDENTITY_REBOUND), str(ErrorReason.NOT_CURRENT_KEY)})

LOCK_FILE = "agent.lock"


class AgentRuntime:
    def __init__(
        self,
        settings: AgentSettings,
        *,
        backend_transport: Transport | None = None,
        instance_id: str | None = None,
        enroll_backoff: Backoff | None = None,
        collectors: CollectorFactory = default_collectors,
        program_files: ProgramFiles | None = None,
    ) -> None:
        self.settings = settings
        self.instance_id = instance_id or uuid.uuid4().hex
        self.readiness = Readiness(settings.data_dir)
        self.store = StateStore(settings.data_dir)
        self.health: HealthServer | None = None
        self.session: NatsSession | None = None
        self.dispatcher: CommandDispatcher | None = None
        self.ledger: CommandLedger | None = None
        self.started = time.monotonic()
        self.self_update = SelfUpdateFeature(settings, version=__version__, files=program_files)
        self.can_self_update = self.self_update.possible
        self.exec_request: ExecRequest | None = None
        self._collectors = collectors
        self._backend_transport = backend_transport
        self._backend: BackendClient | None = None
        self._enroll_backoff = enroll_backoff
        self._stop = asyncio.Event()
        self._lock_fd: int | None = None

    # -- setup ----------------------------------------------------------------------------

    def _backend_url(self, state: AgentState | None) -> str:
        if self.settings.backend_url:
            return self.settings.backend_url
        if state is not None:
            return state.backend_url
        raise ConfigError(setting_label("backend_url"), "required to enroll (no state file yet)")

    async def _fetch_jwt(self, agent_id: str, seed: str) -> str | None:
        """A JWT for ``seed``'s key from the Console, or None when it refuses or is away."""
        try:
            answer = await self.backend().nats_credentials(agent_id, seed)
        except BackendAnswerError as e:
            if e.status == 401 and e.reason in _RETIRED_REASONS:
                raise IdentityRetiredError(e.reason, e.detail or str(e)) from None
            log.warning("could not fetch nats credentials for agent %s: %s", agent_id, e)
            return None
        except BackendError as e:
            log.warning("could not fetch nats credentials for agent %s: %s", agent_id, e)
            return None
        return answer.nats_jwt

    def backend(self) -> BackendClient:
        if self._backend is None:
            self._backend = BackendClient(
                self._backend_url(self.store.loaded),
                transport=self._backend_transport,
                user_agent=f"proxima-agent/{__version__}",
            )
        return self._backend

    def _install_token(self) -> InstallToken:
        s = self.settings
        if s.install_token is None and s.install_token_file is None:
            raise ConfigError(
                f"{setting_label('install_token')} or {setting_label('install_token_file')}",
                "an install token is required to enroll (no state file yet)",
            )
        return InstallToken(value=s.install_token, file=s.install_token_file)

    def _prepare_data_dir(self) -> None:
        data_dir = self.settings.data_dir
        try:
            ensure_private_dir(data_dir)
        except OSError as e:
            raise EnvironmentProblemError(
                f"data directory {data_dir}", e.strerror or str(e)
            ) from None
        if not os.access(data_dir, os.W_OK | os.X_OK):
            raise EnvironmentProblemError(f"data directory {data_dir}", "not writable")

    def _warn_if_shared(self, data_dir: Path) -> None:
        """Two processes on one data directory share one identity: say so loudly, but run —
        the Console flags the pair from their instance ids and the operator decides."""
        path = data_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            log.debug("cannot open %s: %s", path, e)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log.warning(
                "another agent process is using data directory %s: two agents on one data "
                "directory share one identity; give each agent its own data directory",
                data_dir,
            )
            os.close(fd)
            return
        self._lock_fd = fd

    # -- run ------------------------------------------------------------------------------

    def stop(self) -> None:
        self.readiness.stopping = True
        self._stop.set()

    def request_exec(self, request: ExecRequest) -> None:
        """Stop cleanly (NATS drained, health server closed), then let the CLI exec."""
        self.exec_request = request
        self.stop()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received %s: stopping", sig.name)
        self.stop()

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        s = self.settings
        self._prepare_data_dir()
        state = self.store.load(expected_type=s.agent_type)
        self._warn_if_shared(s.data_dir)
        if state is None:
            # Fail fast on what enrolling needs, before binding anything.
            self._install_token()
            self._backend_url(None)
        else:
            self._open_ledger(state)
            if self.exec_request is not None:
                self._fold_ledger()
                self._release_lock()
                return
        use_host_procfs(s.host_proc)
        log.info(
            "proxima-agent %s starting: type %s, data dir %s, instance %s, self-update %s",
            __version__,
            s.agent_type,
            s.data_dir,
            self.instance_id,
            "possible" if self.can_self_update else f"not possible ({self.self_update.blocker})",
        )
        if install_signal_handlers:
            self._install_signal_handlers()
        self.health = HealthServer(self.readiness, s.health_host, s.health_port, s.data_dir)
        await self.health.start()
        try:
            if state is None:
                state = await self._until_stopped(self._enroll())
                if state is None:
                    return
                self._open_ledger(state)
                if self.exec_request is not None:
                    return
            else:
                self.readiness.mark_enrolled()
                self._note_identity(state)
            await self._serve(state)
        finally:
            await self._shutdown()

    def _open_ledger(self, state: AgentState) -> None:
        """Load the command ledger, settling an update the previous build left."""
        self.ledger = CommandLedger(self.settings.data_dir, state.agent_id)
        request = self.self_update.settle(self.ledger)
        if request is not None:
            self.exec_request = request

    async def _until_stopped(self, work: Any) -> Any:
        """Run ``work`` unless stop comes first; ``None`` when stopped."""
        task = asyncio.ensure_future(work)
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None

    async def _enroll(self) -> AgentState:
        s = self.settings
        backend = self.backend()
        backoff = self._enroll_backoff or Backoff(
            initial=min(1.0, s.enroll_backoff_max), maximum=s.enroll_backoff_max
        )
        config = EnrollmentConfig(
            agent_type=s.agent_type,
            name=s.name,
            backend_url=backend.base_url,
            token=self._install_token(),
            version=__version__,
            instance_id=self.instance_id,
            can_self_update=self.can_self_update,
            host_root=s.host_root,
            host_sys=s.host_sys,
            labels=s.labels,
        )
        pod = events_config(s)
        enroller = Enroller(
            config,
            backend,
            self.store,
            self.readiness,
            backoff=backoff,
            events=PodEvents(pod) if pod is not None else None,
        )
        state = await enroller.enroll()
        # Not needed again unless credentials rotate: free the HTTP client meanwhile.
        await backend.aclose()
        return state

    def _note_identity(self, state: AgentState) -> None:
        s = self.settings
        log.info(
            "already enrolled as agent %s (%s %r): using the identity in %s",
            state.agent_id,
            state.agent_type,
            state.name,
            self.store.path,
        )
        if s.agent_name and s.agent_name != state.name:
            log.warning(
                "configured name %r differs from the enrolled name %r; the enrolled identity "
                "is kept (names are fixed at enrollment)",
                s.agent_name,
                state.name,
            )
        if state.pending_seed is not None:
            log.info("a credential rotation was in flight when the agent stopped")

    def _dispatcher(self, session: NatsSession) -> CommandDispatcher:
        s = self.settings
        ledger = self.ledger
        assert ledger is not None
        rotation = CredentialRotation(
            self.store, self.backend, session, host_root=s.host_root, host_sys=s.host_sys
        )
        delivery = ResultDelivery(
            session,
            ledger,
            backoff=Backoff(initial=min(0.5, s.result_retry_max), maximum=s.result_retry_max),
            ack_timeout=s.result_ack_timeout,
        )
        return CommandDispatcher(
            session,
            ledger,
            {
                CommandKind.PING: ping_handler(self._ping_detail),
                CommandKind.ROTATE_CREDENTIALS: rotation,
                CommandKind.SELF_UPDATE: self.self_update.handler(self.request_exec),
            },
            delivery,
        )

    def _heartbeat_info(self, state: AgentState, collectors: list[Collector]) -> HeartbeatInfo:
        s = self.settings
        log.info(
            "heartbeat every %s; %s",
            format_duration(s.heartbeat_interval),
            ", ".join(f"{c.name} every {format_duration(c.interval)}" for c in collectors)
            or "no collectors",
        )
        return HeartbeatInfo(
            instance_id=self.instance_id,
            agent_type=state.agent_type,
            version=__version__,
            heartbeat_interval=s.heartbeat_interval,
            metrics_interval=s.metrics_interval if collectors else None,
            can_self_update=self.can_self_update,
            self_update_blocker=self.self_update.blocker_kind,
            labels=s.labels,
            started=self.started,
            fields=heartbeat_fields(s, collectors),
        )

    async def _serve(self, state: AgentState) -> None:
        s = self.settings
        self.self_update.console_url = self._backend_url(state)
        policy = ReconnectPolicy(
            wait=s.nats_reconnect_wait,
            max_wait=s.nats_reconnect_max_wait,
            jitter=s.nats_reconnect_jitter,
        )
        session = NatsSession(
            self.store,
            self.readiness,
            policy=policy,
            on_message=self._on_message,
            fetch_jwt=self._fetch_jwt,
        )
        self.session = session
        self.dispatcher = self._dispatcher(session)
        collectors = self._collectors(s, state)
        info = self._heartbeat_info(state, collectors)
        # Liveness: the heartbeat loop comes round every interval, connected or not.
        watch = self.readiness.watch("heartbeat", 3 * s.heartbeat_interval + 60)
        tasks = [
            asyncio.create_task(session.run(), name="nats-session"),
            asyncio.create_task(self.dispatcher.run(), name="commands"),
            asyncio.create_task(self.dispatcher.delivery.run(), name="results"),
            asyncio.create_task(heartbeat_loop(session, info, watch.beat), name="heartbeat"),
        ]
        for collector in collectors:
            tasks.append(
                asyncio.create_task(collector_loop(session, collector), name=collector.name)
            )
        probation = self.self_update.probation_watch(
            self.readiness, self.dispatcher, self.request_exec
        )
        if probation is not None:
            tasks.append(asyncio.create_task(probation, name="probation"))
        await self._until_stop_or_failure(tasks, session, policy.drain_timeout)

    async def _until_stop_or_failure(
        self, tasks: list[asyncio.Task[Any]], session: NatsSession, drain_timeout: float
    ) -> None:
        """Wait for the stop event (a failed task raises); then stop the session (``tasks[0]``)
        and cancel the rest."""
        stopper = asyncio.create_task(self._stop.wait(), name="stop")
        try:
            pending = {*tasks, stopper}
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not stopper and not task.cancelled() and task.exception():
                        raise task.exception()  # type: ignore[misc]
                # A finished probation watch or a dispatcher that handed over is no reason
                # to stop; only the stop event (or a failure) is.
                if stopper in done:
                    break
        finally:
            # Only a live connection has anything to drain: a session that never connected
            # (a new build rolled back for it) gets a second, not the drain timeout.
            drain = drain_timeout + 1 if self.readiness.nats_connected else 1.0
            await session.stop()
            session_task = tasks[0]
            for task in tasks[1:]:
                task.cancel()
            stopper.cancel()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(session_task, drain)
            await asyncio.gather(*tasks[1:], stopper, return_exceptions=True)

    def _on_message(self, subject: str, payload: bytes) -> None:
        if self.dispatcher is not None:
            self.dispatcher.submit(subject, payload)

    def _ping_detail(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "version": __version__,
            "uptime_seconds": round(time.monotonic() - self.started, 3),
        }

    def _fold_ledger(self) -> None:
        """Leave the ledger as one snapshot, the form every build reads (an older one included,
        should this stop be a self_update handing over or rolling back)."""
        if self.ledger is not None:
            try:
                self.ledger.fold()
            except OSError as e:
                log.warning("cannot fold the command journal into %s: %s", self.ledger.path, e)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def _shutdown(self) -> None:
        if self._backend is not None:
            await self._backend.aclose()
        if self.health is not None:
            await self.health.close()
        self._fold_ledger()
        self._release_lock()
        log.info(
            "proxima-agent stopped" if self.exec_request is None else "proxima-agent handing over"
        )
