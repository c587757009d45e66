"""Everything the agent raises on purpose, each exception carrying the data it is about.

::

    AgentError
    ├── ConfigError                  a flag or environment variable is wrong   (exit 2)
    ├── StateError                   the state file cannot be used              (exit 3)
    │   ├── StateCorruptError        not JSON, or not a state file
    │   ├── StateUnreadableError     permission denied, I/O error
    │   ├── StateVersionError        written by a newer agent
    │   ├── StateConflictError       appeared while this process was enrolling
    │   └── StateTypeMismatchError   belongs to another agent type              (exit 4)
    ├── EnvironmentProblemError      data dir not writable, health port taken   (exit 5)
    ├── NotEnrolledError             ``status`` found no state file             (exit 6)
    ├── BackendError                 talking to the Console over HTTP (always retried)
    │   ├── BackendUnreachableError  refused, DNS, timeout, TLS
    │   └── BackendAnswerError       an answer that is not success
    └── NatsConnectError             a NATS connect attempt failed (always retried)
        └── NatsAuthorizationError   the server refused our credentials
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """What ``proxima-agent`` returns; documented in ``docs/agent.md``."""

    OK = 0
    INTERNAL = 1
    CONFIG = 2
    STATE = 3
    STATE_TYPE_MISMATCH = 4
    ENVIRONMENT = 5
    NOT_ENROLLED = 6


class AgentError(Exception):
    """Base of every deliberate agent failure. ``exit_code`` is what the CLI returns."""

    exit_code: ExitCode = ExitCode.INTERNAL


class ConfigError(AgentError):
    """A configuration value is missing or invalid; ``setting`` names the flag/env var."""

    exit_code = ExitCode.CONFIG

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class StateError(AgentError):
    exit_code = ExitCode.STATE

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


class StateCorruptError(StateError):
    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            path,
            f"state file {path} is corrupt ({detail}); refusing to start. It is left in place: "
            "restore it from a backup, or move it away to enroll this agent as a new identity.",
        )
        self.detail = detail


class StateUnreadableError(StateError):
    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(path, f"state file {path} cannot be read: {detail}")
        self.detail = detail


class StateVersionError(StateError):
    def __init__(self, path: Path, found: int, supported: int) -> None:
        super().__init__(
            path,
            f"state file {path} has schema version {found}, newer than this agent "
            f"understands ({supported}); run the newer agent, or restore a matching file.",
        )
        self.found = found
        self.supported = supported


class StateConflictError(StateError):
    def __init__(self, path: Path) -> None:
        super().__init__(
            path,
            f"state file {path} appeared while this process was enrolling: another agent "
            "process uses this data directory; refusing to overwrite its identity.",
        )


class StateTypeMismatchError(StateError):
    exit_code = ExitCode.STATE_TYPE_MISMATCH

    def __init__(self, path: Path, persisted: str, configured: str) -> None:
        super().__init__(
            path,
            f"state file {path} belongs to a {persisted} agent but this agent is configured as "
            f"{configured}; refusing to start. The file is left in place: on a shared data "
            "directory it belongs to the other agent.",
        )
        self.persisted = persisted
        self.configured = configured


class EnvironmentProblemError(AgentError):
    """The machine does not let us run: data directory not writable, port taken."""

    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.what = what
        self.detail = detail


class NotEnrolledError(AgentError):
    exit_code = ExitCode.NOT_ENROLLED

    def __init__(self, path: Path) -> None:
        super().__init__(f"no state file at {path}: this agent has not enrolled yet")
        self.path = path


class BackendError(AgentError):
    """Talking to the Console failed. ``summary`` is a short form for the readiness reason."""

    def __init__(self, url: str, message: str, summary: str) -> None:
        super().__init__(message)
        self.url = url
        self.summary = summary


class BackendUnreachableError(BackendError):
    def __init__(self, url: str, detail: str, *, refused: bool) -> None:
        if refused:
            message = (
                f"connection refused to backend {url}: check backendUrl and cluster egress rules"
            )
            summary = f"connection refused to backend {url}"
        else:
            message = (
                f"cannot reach backend {url} ({detail}): check backendUrl, DNS and cluster "
                "egress rules"
            )
            summary = f"backend unreachable: {detail}"
        super().__init__(url, message, summary)
        self.detail = detail
        self.refused = refused


class BackendAnswerError(BackendError):
    """The Console answered, but not with success; ``reason`` is its machine-readable reason."""

    def __init__(
        self,
        url: str,
        status: int,
        reason: str,
        message: str,
        agent_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        text = f"backend {url} answered {status} {reason}"
        if message:
            text += f": {message}"
        super().__init__(url, text, f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.detail = message
        self.agent_id = agent_id
        # Seconds the Console asked us to wait (``Retry-After`` on a 429 or 503), if it did.
        self.retry_after = retry_after

    @property
    def definite(self) -> bool:
        """A 4xx is the Console's decision; a 5xx or garbled answer leaves the outcome unknown."""
        return 400 <= self.status < 500


class NatsConnectError(AgentError):
    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"nats connect to {url} failed: {detail}")
        self.url = url
        self.detail = detail


class NatsAuthorizationError(NatsConnectError):
    def __init__(self, url: str) -> None:
        super().__init__(url, "Authorization Violation")


class IdentityRetiredError(AgentError):
    """The Console says this agent's key is no longer the identity's key (re-bound to another
    machine, revoked, released or rotated away): no fresh JWT will make NATS take it again."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
