"""Enrollment: prove a fresh nkey to the Console with an install token, persist the identity.

Every failure is retried with backoff: a 409 may clear when the Console re-binds or an operator
releases the old record, a 401 when the token Secret is fixed, a refused connection when the
network is. Meanwhile the agent stays Ready (``/readyz`` means running and working) and says
why: in its log once per backoff step, on ``/connectedz``, and, for a refusal in a pod, in a
``Warning`` Event ``EnrollmentRefused`` on the pod (``agent/kube_events.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr, ValidationError

from agent.backend import BackendClient, EnrollAnswer
from agent.credentials import new_seed, public_key, sign
from agent.errors import AgentError, BackendAnswerError, BackendError
from agent.files import write_atomic
from agent.health import Readiness
from agent.kube_events import EventReason, PodEvents
from agent.signals import read_signals
from agent.state import AgentState, StateStore
from contracts.backoff import RETRY_AFTER_CAP, Backoff, RetryLog, honour_retry_after
from contracts.durations import format_duration
from contracts.enrollment import EnrollRequest, IdentitySignals, enrollment_message
from contracts.vocabulary import AgentType, ErrorReason

__all__ = [
    "ENROLLMENT_KEY_FILE",
    "Enroller",
    "EnrollmentConfig",
    "EnrollmentKey",
    "EnrollmentKeyError",
    "EnrollmentRequestError",
    "InstallToken",
    "InstallTokenError",
    "StateWriteError",
]

log = logging.getLogger(__name__)


class InstallTokenError(AgentError):
    """The install token file cannot be read (yet): retried, a Secret may be mounted late."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"install token file {path} cannot be read: {detail}")
        self.path = path
        self.summary = "install token file unreadable"


ENROLLMENT_KEY_FILE = "enrollment.key"


class EnrollmentKeyError(AgentError):
    """The enrollment key cannot be kept in the data directory: retried, nothing is sent."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot write enrollment key {path}: {error.strerror or error}")
        self.summary = "data directory not writable"


class StateWriteError(AgentError):
    """Enrolled, but the state file cannot be written: retried with the same key."""

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot write state file {path}: {error.strerror or error}")
        self.summary = "state file not writable"


class EnrollmentKey:
    """The key an enrollment proves, kept on disk until the identity is in ``state.json``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ENROLLMENT_KEY_FILE

    def load_or_create(self) -> str:
        try:
            seed = self.path.read_text(encoding="ascii").strip()
            public_key(seed)
            return seed
        except FileNotFoundError:
            pass
        except (OSError, ValueError, UnicodeDecodeError) as e:
            log.warning("enrollment key %s unusable (%s); making a new one", self.path, e)
        seed = new_seed()
        try:
            write_atomic(self.path, seed.encode())
        except OSError as e:
            raise EnrollmentKeyError(self.path, e) from None
        return seed

    def discard(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as e:
            log.warning("cannot remove enrollment key %s: %s", self.path, e)


class EnrollmentRequestError(AgentError):
    """Our own request does not pass the contract (a too-short token, say): retried, since the
    token file may be corrected."""

    def __init__(self, error: ValidationError) -> None:
        # Field names and messages only: input values could be the token.
        problem = "; ".join(
            f"{'.'.join(map(str, item['loc']))}: {item['msg']}"
            for item in error.errors(include_input=False, include_url=False)
        )
        super().__init__(f"invalid enrollment request: {problem}")
        self.summary = "invalid enrollment request"


@dataclass(frozen=True)
class InstallToken:
    """The token itself, or a file holding it; the file is read again on every attempt so a
    rotated Kubernetes Secret takes effect without a restart."""

    value: SecretStr | None = None
    file: Path | None = None

    def read(self) -> str:
        if self.value is not None:
            return self.value.get_secret_value()
        if self.file is None:
            raise InstallTokenError(Path("-"), "no install token configured")
        try:
            text = self.file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise InstallTokenError(self.file, e.strerror or str(e)) from None
        if not text:
            raise InstallTokenError(self.file, "the file is empty")
        return text


@dataclass(frozen=True)
class EnrollmentConfig:
    agent_type: AgentType
    name: str
    backend_url: str
    token: InstallToken
    version: str
    instance_id: str
    can_self_update: bool
    host_root: Path = Path("/")
    host_sys: Path | None = None
    labels: dict[str, str] = field(default_factory=dict)


def _advice(error: BackendAnswerError) -> str:
    if error.status == 409:
        return (
            "the Console shows the conflict; it clears when the old record is re-bound or released"
        )
    if error.reason == ErrorReason.STALE_SIGNATURE:
        return "check this machine's clock: the Console refuses a request signed far from its own"
    if error.reason == ErrorReason.BAD_SIGNATURE:
        return "the Console could not verify the enrollment's signature"
    if error.status in (401, 403):
        return "check the install token (a fixed token Secret is picked up on the next attempt)"
    if 400 <= error.status < 500:
        return "the Console refused the request"
    return "the Console failed"


class Enroller:
    """Enrolls until it succeeds (or is cancelled) and writes the state file."""

    def __init__(
        self,
        config: EnrollmentConfig,
        backend: BackendClient,
        store: StateStore,
        readiness: Readiness,
        *,
        backoff: Backoff,
        retry_log: RetryLog | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        events: PodEvents | None = None,
    ) -> None:
        self.config = config
        self.events = events
        self.backend = backend
        self.store = store
        self.readiness = readiness
        self.backoff = backoff
        self.retry_log = retry_log or RetryLog()
        self._sleep = sleep
        # One key pair, reused across attempts and restarts until the identity is persisted.
        self.key = EnrollmentKey(store.path.parent)
        self._seed = ""
        self.attempts = 0

    def _request(self, signals: IdentitySignals) -> EnrollRequest:
        cfg = self.config
        public = public_key(self._seed)
        signed_at = datetime.now(UTC)
        token = cfg.token.read()
        message = enrollment_message(
            install_token=token,
            agent_type=str(cfg.agent_type),
            name=cfg.name,
            public_key=public,
            signed_at=signed_at,
            version=cfg.version,
            instance_id=cfg.instance_id,
            signals=signals.present(),
            can_self_update=cfg.can_self_update,
            labels=cfg.labels,
        )
        try:
            return EnrollRequest(
                install_token=token,
                agent_type=cfg.agent_type,
                name=cfg.name,
                public_key=public,
                signature=sign(self._seed, message),
                signed_at=signed_at,
                signals=signals,
                version=cfg.version,
                instance_id=cfg.instance_id,
                can_self_update=cfg.can_self_update,
                labels=cfg.labels,
            )
        except ValidationError as e:
            raise EnrollmentRequestError(e) from None

    async def enroll(self) -> AgentState:
        cfg = self.config
        signals = read_signals(cfg.host_root, cfg.host_sys)
        log.info(
            "enrolling %s agent %r with backend %s (identity signals: %s)",
            cfg.agent_type,
            cfg.name,
            cfg.backend_url,
            ", ".join(sorted(signals.present())) or "none",
        )
        # Liveness: a round at least every backoff step (or Retry-After), plus the request.
        watch = self.readiness.watch(
            "enrollment", 3 * max(self.backoff.maximum, RETRY_AFTER_CAP) + 60
        )
        attempt = 0
        try:
            while True:
                watch.beat()
                self.attempts += 1
                try:
                    self._seed = self._seed or self.key.load_or_create()
                    answer = await self.backend.enroll(self._request(signals))
                    state = self._persist(answer)
                except (
                    BackendError,
                    InstallTokenError,
                    EnrollmentRequestError,
                    EnrollmentKeyError,
                    StateWriteError,
                ) as e:
                    await self._wait_after(e, attempt)
                    attempt += 1
                    continue
                self.key.discard()
                await self._event(
                    "Normal", EventReason.ENROLLED, self._enrolled_text(answer), "enrolled"
                )
                return state
        finally:
            self.readiness.unwatch("enrollment")

    async def _event(self, type_: str, reason: EventReason, message: str, key: str) -> None:
        if self.events is not None:
            await self.events.record(type_, reason, message, key)

    async def _wait_after(self, error: Exception, attempt: int) -> None:
        """Back off; when the Console said how long (``Retry-After`` on a 429 or 503), wait at
        least that (capped, jittered)."""
        asked = getattr(error, "retry_after", None)
        step = honour_retry_after(asked, self.backoff.step(attempt), jitter=0.0)
        summary = getattr(error, "summary", str(error))
        self.readiness.set_enrollment_problem(summary)
        if self.retry_log.should_log(summary, step):
            if isinstance(error, BackendAnswerError):
                agent = f" (agent {error.agent_id})" if error.agent_id else ""
                log.warning(
                    "enrollment refused: %s%s: %s; retrying with backoff, next in %s",
                    error,
                    agent,
                    _advice(error),
                    format_duration(round(step, 3)),
                )
                await self._event(
                    "Warning",
                    EventReason.ENROLLMENT_REFUSED,
                    f"enrollment refused: {error.status} {error.reason}: "
                    f"{error.detail or 'no detail'}; {_advice(error)}; the agent keeps "
                    f"retrying (next in {format_duration(round(step, 3))}) and stays Ready",
                    f"refused {error.status} {error.reason}",
                )
            else:
                log.warning(
                    "enrollment failed: %s; retrying with backoff, next in %s",
                    error,
                    format_duration(round(step, 3)),
                )
        await self._sleep(honour_retry_after(asked, self.backoff.delay(attempt)))

    def _persist(self, answer: EnrollAnswer) -> AgentState:
        cfg = self.config
        response = answer.response
        state = AgentState(
            agent_id=response.agent_id,
            agent_type=response.agent_type,
            name=response.name,
            seed=SecretStr(self._seed),
            nats_url=response.nats_url,
            nats_jwt=response.nats_jwt,
            backend_url=cfg.backend_url,
            client_id=response.client_id,
            environment_id=response.environment_id,
            enrolled_at=datetime.now(UTC),
        )
        try:
            self.store.create(state)
        except OSError as e:
            raise StateWriteError(self.store.path, e) from None
        self.readiness.mark_enrolled()
        log.info("%s", self._enrolled_text(answer))
        return state

    @staticmethod
    def _enrolled_text(answer: EnrollAnswer) -> str:
        r = answer.response
        what = f"{r.agent_id} ({r.agent_type} {r.name!r}) in environment {r.environment_id}"
        if r.rebound:
            return f"enrolled: re-bound to existing agent {what}"
        return f"enrolled as agent {what}"
