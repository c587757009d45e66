"""Messages on NATS: heartbeats, metrics, commands and their results."""

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from contracts.lenient import unknown_as_none
from contracts.vocabulary.agents import AgentType
from contracts.vocabulary.commands import CommandFailureKind, CommandKind, CommandStatus

# A kind this build does not know (a newer agent's) reads None rather than failing the message.
FailureKindField = Annotated[CommandFailureKind | None, unknown_as_none(CommandFailureKind)]


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    agent_id: str
    instance_id: str = Field(description="Random per process: two at once means a shared identity")
    agent_type: AgentType
    version: str
    sent_at: datetime
    uptime_seconds: float
    heartbeat_interval_seconds: float
    metrics_interval_seconds: float | None = None
    sync_interval_seconds: float | None = None
    can_self_update: bool = True
    self_update_blocker: FailureKindField = Field(
        default=None,
        description="Why ``can_self_update`` is false, as a fact (``not_self_updatable``, "
        "``no_signing_key``, ``not_single_file_build``, ``read_only_program``); None when it can, "
        "and from agents that do not send it yet",
    )
    leader: bool | None = None
    cluster_slug: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class HostMetrics(BaseModel):
    model_config = ConfigDict(extra="ignore")

    agent_id: str
    sent_at: datetime
    cpu_percent: float
    load1: float
    memory_total_bytes: int
    memory_used_bytes: int
    disk_root_total_bytes: int | None = None
    disk_root_used_bytes: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class Command(BaseModel):
    """Sent on ``proxima.cmd.<agent_id>``. ``command_id`` makes redelivery harmless."""

    model_config = ConfigDict(extra="ignore")

    command_id: str
    kind: CommandKind
    issued_at: datetime
    args: dict[str, Any] = Field(default_factory=dict)


class CommandResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    command_id: str
    agent_id: str
    kind: CommandKind
    status: CommandStatus
    finished_at: datetime
    error: str | None = None
    failure_kind: FailureKindField = Field(
        default=None,
        description="Why it was rejected or failed, as a fact (``error`` is the prose); None from "
        "agents that do not send it yet",
    )
    detail: dict[str, Any] = Field(default_factory=dict)


__all__ = [
    "Command",
    "CommandFailureKind",
    "CommandKind",
    "CommandResult",
    "CommandStatus",
    "Heartbeat",
    "HostMetrics",
]
