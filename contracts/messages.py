"""Messages on NATS: heartbeats, metrics, commands and their results."""

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from contracts.bounds import (
    FINITE,
    ClusterSlugText,
    Count,
    Detail,
    Identifier,
    Labels,
    ResultDetail,
    Seconds,
    VersionText,
    text,
)
from contracts.lenient import unknown_as_none
from contracts.vocabulary import AgentType
from contracts.vocabulary.commands import (
    CommandFailureKind,
    CommandKind,
    CommandStatus,
    ResultAckOutcome,
)
from contracts.vocabulary.reasons import ErrorReason

# A kind this build does not know (a newer agent's) reads None rather than failing the message.
FailureKindField = Annotated[CommandFailureKind | None, unknown_as_none(CommandFailureKind)]

Uptime = Annotated[float, Field(ge=0, le=1e11)]
Percent = Annotated[float, Field(ge=0, le=1e6)]


class Heartbeat(BaseModel):
    """Every field bounded (``contracts.bounds``): a heartbeat over a bound is dropped whole
    and counted (``proxima_messages_rejected_total``), never stored."""

    model_config = ConfigDict(extra="ignore", **FINITE)

    agent_id: Identifier
    instance_id: Identifier = Field(
        description="Random per process: two at once means a shared identity"
    )
    agent_type: AgentType
    version: VersionText
    sent_at: datetime
    uptime_seconds: Uptime
    heartbeat_interval_seconds: Seconds
    metrics_interval_seconds: Seconds | None = None
    sync_interval_seconds: Seconds | None = None
    can_self_update: bool = True
    self_update_blocker: FailureKindField = Field(
        default=None,
        description="Why ``can_self_update`` is false, as a fact (``not_self_updatable``, "
        "``no_signing_key``, ``not_single_file_build``, ``read_only_program``); None when it can, "
        "and from agents that do not send it yet",
    )
    leader: bool | None = None
    cluster_slug: ClusterSlugText | None = None
    labels: Labels = Field(default_factory=dict)


class HostMetrics(BaseModel):
    model_config = ConfigDict(extra="ignore", **FINITE)

    agent_id: Identifier
    sent_at: datetime
    cpu_percent: Percent
    load1: Percent
    memory_total_bytes: Count
    memory_used_bytes: Count
    disk_root_total_bytes: Count | None = None
    disk_root_used_bytes: Count | None = None
    extra: Detail = Field(default_factory=dict)


class Command(BaseModel):
    """Sent on ``proxima.cmd.<agent_id>``. ``command_id`` makes redelivery harmless."""

    model_config = ConfigDict(extra="ignore", **FINITE)

    command_id: Identifier
    kind: CommandKind
    issued_at: datetime
    args: Detail = Field(default_factory=dict)


class CommandResult(BaseModel):
    model_config = ConfigDict(extra="ignore", **FINITE)

    command_id: Identifier
    agent_id: Identifier
    kind: CommandKind
    status: CommandStatus
    finished_at: datetime
    error: Annotated[str, text()] | None = None
    failure_kind: FailureKindField = Field(
        default=None,
        description="Why it was rejected or failed, as a fact (``error`` is the prose); None from "
        "agents that do not send it yet",
    )
    detail: ResultDetail = Field(default_factory=dict)


class ResultAck(BaseModel):
    """The Console's reply to a command result sent as a request (``docs/rollouts.md``,
    "Delivery guarantees"): sent only after the result's transaction has committed, or to say
    why it was not. The agent keeps the result until an answer whose outcome is settled."""

    model_config = ConfigDict(extra="ignore", **FINITE)

    command_id: Identifier
    outcome: ResultAckOutcome
    reason: ErrorReason | None = None
    message: Annotated[str, text()] | None = None


__all__ = [
    "Command",
    "CommandFailureKind",
    "CommandKind",
    "CommandResult",
    "CommandStatus",
    "Heartbeat",
    "HostMetrics",
    "ResultAck",
    "ResultAckOutcome",
]
