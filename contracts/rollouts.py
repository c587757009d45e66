"""Rollouts over the Console API: what the operator and the flow send and read back.

The decisions themselves (eligibility, waves, thresholds, states) live in ``rollout_policy``;
these are only the wire shapes, shared by the Console's routes and the flows' typed client.
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    model_validator,
)

from contracts.bounds import FINITE, Identifier, Labels, VersionRangeText, VersionText, text
from contracts.vocabulary import AgentType
from contracts.vocabulary.commands import CommandFailureKind
from contracts.vocabulary.rollouts import (
    DEFAULT_CANARY_SIZE,
    DEFAULT_FAILURE_TYPE,
    DEFAULT_MIN_EXECUTED,
    DEFAULT_THRESHOLD_ACTION,
    DEFAULT_THRESHOLD_PERCENT,
    DEFAULT_WAVE_PERCENTAGES,
    DEFAULT_WAVE_TIMEOUT_SECONDS,
    DriverLostReason,
    FailureType,
    RolloutState,
    TargetStatus,
    ThresholdAction,
)

Sha256 = Annotated[str, StringConstraints(max_length=64, pattern=r"^[0-9a-f]{64}$")]


class ArtifactRef(BaseModel):
    """A signed build of the agent program. ``signature`` is base64url ed25519 over the file's
    SHA-256 digest (32 raw bytes), made with the fleet's signing key."""

    model_config = ConfigDict(extra="forbid")

    version: VersionText
    url: Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=r"^[!-~]+$")]
    sha256: Sha256
    signature: Annotated[str, StringConstraints(min_length=16, max_length=256)]


HOSTED_ARTIFACTS_PATH = "/api/v1/artifacts/"


def _origin_and_path(url: str) -> tuple[str, str, str] | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host or "@" in parts.netloc:
        return None
    decoded = unquote(parts.path)
    if any(segment in (".", "..") for segment in decoded.split("/")) or "\\" in decoded + url:
        return None
    netloc = host if port is None else f"{host}:{port}"
    return parts.scheme, netloc, parts.path or "/"


def artifact_url_allowed(url: str, prefixes: Iterable[str]) -> bool:
    """Whether ``url`` lies under one of ``prefixes`` (each ``scheme://host[:port]/path``):
    same scheme and host, a path under the prefix's path taken as a directory. A URL with user
    info, dot segments or backslashes is never allowed. The one rule the Console (rollout
    creation) and the agent (download) apply; the Console's own prefix is
    ``<its URL>/api/v1/artifacts/``."""
    target = _origin_and_path(url)
    if target is None:
        return False
    for prefix in prefixes:
        allowed = _origin_and_path(prefix)
        if allowed is None:
            continue
        directory = allowed[2] if allowed[2].endswith("/") else allowed[2] + "/"
        if target[:2] == allowed[:2] and target[2].startswith(directory):
            return True
    return False


class SelectorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_types: list[AgentType] = Field(default_factory=list, max_length=16)
    labels: Labels = Field(default_factory=dict)
    version_range: VersionRangeText = Field(
        default="", description='e.g. ">=0.7.0,<0.9.0"; empty = any'
    )
    agent_ids: list[Identifier] = Field(default_factory=list, max_length=100_000)


class WaveSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", **FINITE)

    canary_size: Annotated[int, Field(ge=1, le=10_000)] = DEFAULT_CANARY_SIZE
    percentages: list[Annotated[float, Field(gt=0, le=100)]] | None = Field(
        default_factory=lambda: list(DEFAULT_WAVE_PERCENTAGES),
        max_length=100,
        description="cumulative percent of the eligible set after each growth wave",
    )
    growth_factor: Annotated[float, Field(gt=1, le=100)] | None = None
    max_wave_size: Annotated[int, Field(ge=1, le=10_000_000)] | None = None

    @model_validator(mode="after")
    def _one_growth(self) -> "WaveSpec":
        if self.growth_factor is not None:
            self.percentages = None
        return self


class CriterionSpec(BaseModel):
    # The schema states the cross-field rule too, so clients (and schemathesis) can know it.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["threshold_count"],
                    "properties": {"threshold_count": {"type": "integer"}},
                },
                {
                    "required": ["threshold_percent"],
                    "properties": {"threshold_percent": {"type": "number"}},
                },
            ]
        },
        **FINITE,
    )

    failure_type: FailureType = DEFAULT_FAILURE_TYPE
    threshold_count: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    threshold_percent: Annotated[float, Field(gt=0, le=100)] | None = None
    min_executed: Annotated[int, Field(ge=0, le=10_000_000)] = DEFAULT_MIN_EXECUTED
    action: ThresholdAction = DEFAULT_THRESHOLD_ACTION

    @model_validator(mode="after")
    def _has_threshold(self) -> "CriterionSpec":
        if self.threshold_count is None and self.threshold_percent is None:
            raise ValueError("a criterion needs threshold_count and/or threshold_percent")
        return self


class RolloutCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", **FINITE)

    name: Annotated[str, text(128, min_length=1)] = "rollout"
    artifact: ArtifactRef
    selector: SelectorSpec = Field(default_factory=SelectorSpec)
    waves: WaveSpec = Field(default_factory=WaveSpec)
    criteria: list[CriterionSpec] = Field(
        default_factory=lambda: [CriterionSpec(threshold_percent=DEFAULT_THRESHOLD_PERCENT)],
        max_length=16,
    )
    wave_timeout_seconds: Annotated[float, Field(gt=0, le=86400)] = DEFAULT_WAVE_TIMEOUT_SECONDS
    seed: Annotated[str, text(64)] | None = None
    start_flow: StrictBool = Field(
        default=True, description="start the fleet-rollout Prefect deployment for it"
    )


class TargetPublic(BaseModel):
    agent_id: str
    agent_name: str
    wave: int
    status: TargetStatus
    command_id: str | None
    old_version: str | None
    new_version: str | None
    error: str | None
    failure_kind: CommandFailureKind | None = Field(
        default=None,
        description="why the agent's result failed, as a fact (the agent's failure_kind); "
        "error is the same failure as text, for people",
    )
    dispatched_at: datetime | None
    finished_at: datetime | None


class WavePublic(BaseModel):
    index: int
    kind: str
    size: int
    counts: dict[str, int]
    dispatched: bool
    done: bool


class ExclusionPublic(BaseModel):
    agent_id: str
    agent_name: str
    reason: str
    detail: str


class RolloutPublic(BaseModel):
    id: str
    name: str
    environment_id: str
    target_version: str
    artifact: ArtifactRef
    state: RolloutState
    state_reason: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    flow_run_id: str | None
    wave_timeout_seconds: float
    criteria: list[CriterionSpec]
    counts: dict[str, int]
    waves: list[WavePublic]
    exclusions: list[ExclusionPublic]
    targets: list[TargetPublic] | None = None
    threshold: dict[str, Any] | None = Field(
        default=None, description="The tripped criterion when the rollout stalled or aborted"
    )
    driver_lost_reason: DriverLostReason | None = Field(
        default=None,
        description="Set while no flow run drives this unfinished rollout: restart the driver",
    )
    driver_lost_at: datetime | None = None
    driver_lost_detail: str | None = Field(default=None, description="Prefect's word on the run")
    halted_at: datetime | None = Field(
        default=None,
        description="When it last stalled or was paused: which halt a decision answers",
    )


class DispatchResult(BaseModel):
    rollout_id: str
    wave: int
    sent: int = Field(description="commands sent by this call")
    already_sent: int = Field(description="targets dispatched before: not sent again")
    refused: str | None = Field(default=None, description="why nothing was sent (state)")
