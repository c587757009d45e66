"""``state.json``: the agent's identity (agent id, private nkey seed) and how to reconnect.

The file is the identity. It is written atomically with mode 0600, read once at startup, never
logged, and never replaced behind the operator's back: a corrupt file or one that belongs to
another agent type stops the agent with a clear error and stays where it is.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from agent.credentials import public_key
from agent.errors import (
    StateConflictError,
    StateCorruptError,
    StateTypeMismatchError,
    StateUnreadableError,
    StateVersionError,
)
from agent.files import set_aside, write_atomic
from contracts.vocabulary import AgentType

__all__ = ["SCHEMA_VERSION", "STATE_FILE", "AgentState", "StateStore", "public_key_of"]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
SCHEMA_VERSION = 1


def public_key_of(seed: str) -> str:
    """The public nkey (``U…``) of a user seed (``SU…``)."""
    return public_key(seed)


def _check_seed(value: SecretStr | None) -> SecretStr | None:
    if value is None:
        return None
    raw = value.get_secret_value()
    if not raw.startswith("SU"):
        raise ValueError("not an nkey user seed")
    try:
        public_key_of(raw)
    except Exception:  # nkeys raises several unrelated types for a bad seed
        raise ValueError("not a valid nkey user seed") from None
    return value


class AgentState(BaseModel):
    """One agent identity. ``repr`` and the default dump hide the seeds."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = SCHEMA_VERSION
    agent_id: str = Field(min_length=1)
    agent_type: AgentType
    name: str = Field(min_length=1)
    seed: SecretStr
    pending_seed: SecretStr | None = Field(
        default=None, description="A rotated key written before the Console confirmed it"
    )
    nats_url: str = Field(min_length=1)
    nats_jwt: str | None = Field(
        default=None, description="NATS user JWT for ``seed`` (signed by the fleet account)"
    )
    pending_jwt: str | None = Field(default=None, description="NATS user JWT for pending_seed")
    backend_url: str = Field(min_length=1)
    client_id: str
    environment_id: str
    enrolled_at: datetime
    rotated_at: datetime | None = None

    _check_seeds = field_validator("seed", "pending_seed")(_check_seed)

    @property
    def public_key(self) -> str:
        return public_key_of(self.seed.get_secret_value())

    def file_content(self) -> bytes:
        """What goes on disk: the only place the seeds are written out in clear."""
        data: dict[str, Any] = self.model_dump(mode="json")
        data["seed"] = self.seed.get_secret_value()
        data["pending_seed"] = (
            self.pending_seed.get_secret_value() if self.pending_seed is not None else None
        )
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()

    def public_view(self) -> dict[str, Any]:
        """What ``status`` prints: identity without any private key material."""
        return {
            "agent_id": self.agent_id,
            "agent_type": str(self.agent_type),
            "name": self.name,
            "public_key": self.public_key,
            "rotation_pending": self.pending_seed is not None,
            "nats_url": self.nats_url,
            "backend_url": self.backend_url,
            "client_id": self.client_id,
            "environment_id": self.environment_id,
            "enrolled_at": self.enrolled_at.isoformat(),
            "rotated_at": self.rotated_at.isoformat() if self.rotated_at else None,
            "schema_version": self.schema_version,
        }


def _describe(error: ValidationError) -> str:
    # Never include input values: they could be the seed.
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "file"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


class StateStore:
    """Reads and writes one ``state.json``; ``current`` is the last state read or written."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATE_FILE
        self._current: AgentState | None = None

    @property
    def current(self) -> AgentState:
        if self._current is None:
            raise RuntimeError("no agent state loaded yet")
        return self._current

    @property
    def loaded(self) -> AgentState | None:
        """``current``, or ``None`` before a state was read or written."""
        return self._current

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> AgentState | None:
        """The state on disk, or ``None`` when there is no file. Does not check the type."""
        raw = self._read_raw()
        return None if raw is None else self._parse(raw, expected_type=None)

    def load(self, *, expected_type: AgentType) -> AgentState | None:
        """Read the state for an agent configured as ``expected_type``; ``None`` when there is no
        valid file. A corrupt file is renamed aside (never deleted) so that the agent enrolls, as
        the chart's page says an agent does when no valid state file is present; re-bind then
        brings the old record back when the machine's evidence matches. A file of another agent
        type or of a newer build is refused, untouched."""
        raw = self._read_raw()
        if raw is None:
            return None
        try:
            state = self._parse(raw, expected_type=expected_type)
        except StateCorruptError as e:
            aside = set_aside(self.path)
            log.error(
                "state file %s is corrupt (%s): moved it to %s and enrolling again; the Console "
                "re-binds this agent to its old record when the machine's identity evidence "
                "matches and that record has been quiet for the quiet window",
                self.path,
                e.detail,
                aside,
            )
            return None
        self._tighten_mode()
        self._current = state
        return state

    def _read_raw(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise StateUnreadableError(self.path, "it is a directory") from None
        except OSError as e:
            raise StateUnreadableError(self.path, e.strerror or str(e)) from None

    def _parse(self, raw: bytes, *, expected_type: AgentType | None) -> AgentState:
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StateCorruptError(self.path, f"not valid JSON: {e.__class__.__name__}") from None
        if not isinstance(data, dict):
            raise StateCorruptError(self.path, "not a JSON object")
        version = data.get("schema_version", SCHEMA_VERSION)
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise StateVersionError(self.path, version, SCHEMA_VERSION)
        persisted = data.get("agent_type")
        # Compared before full validation: the file may belong to another agent (or a newer
        # build of it) and must be refused on that ground, untouched.
        if expected_type is not None and isinstance(persisted, str) and persisted != expected_type:
            raise StateTypeMismatchError(self.path, persisted, str(expected_type))
        try:
            return AgentState.model_validate(data)
        except ValidationError as e:
            raise StateCorruptError(self.path, _describe(e)) from None

    def _tighten_mode(self) -> None:
        try:
            mode = stat.S_IMODE(self.path.stat().st_mode)
            if mode & 0o077:
                log.warning("state file %s had mode %o; tightening it to 0600", self.path, mode)
                os.chmod(self.path, 0o600)
        except OSError as e:
            log.warning("cannot check the mode of state file %s: %s", self.path, e)

    def create(self, state: AgentState) -> None:
        """Write a freshly enrolled identity; never clobbers a file that appeared meanwhile."""
        try:
            write_atomic(self.path, state.file_content(), exclusive=True)
        except FileExistsError:
            raise StateConflictError(self.path) from None
        self._current = state

    def replace(self, state: AgentState) -> None:
        write_atomic(self.path, state.file_content())
        self._current = state

    def update(self, **changes: Any) -> AgentState:
        """Write ``current`` with ``changes`` applied, then make it current."""
        if changes.get("pending_seed", ...) is None:
            changes.setdefault("pending_jwt", None)
        for key in ("seed", "pending_seed"):
            if isinstance(changes.get(key), str):
                changes[key] = SecretStr(changes[key])
        new = self.current.model_copy(update=changes)
        self.replace(new)
        return new
