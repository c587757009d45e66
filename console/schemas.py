"""The Console's own API shapes: what routes accept and return (the shapes other processes
read live in ``contracts``). One home per shape: the web pages render these same models."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts.inventory import InventoryProblem
from contracts.views import OnboardingStatus, ReleaseDecision
from contracts.vocabulary import AgentFlag, AgentStatus


class Scope(StrEnum):
    AGENTS_READ = "agents:read"
    AGENTS_WRITE = "agents:write"
    TOKENS_READ = "tokens:read"
    TOKENS_WRITE = "tokens:write"
    ROLLOUTS_READ = "rollouts:read"
    ROLLOUTS_WRITE = "rollouts:write"
    CLUSTERS_READ = "clusters:read"
    CLUSTERS_WRITE = "clusters:write"


ALL_SCOPES = [s.value for s in Scope]

ShortName = Annotated[str, StringConstraints(min_length=1, max_length=128)]


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class InstallTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ShortName = "install token"
    expires_in_seconds: Annotated[int, Field(gt=0, le=366 * 86400)] | None = None
    max_uses: Annotated[int, Field(gt=0, le=1_000_000)] | None = None
    cluster_slug: Annotated[str, StringConstraints(max_length=63)] | None = None


class InstallTokenPublic(BaseModel):
    id: str
    name: str
    prefix: str
    environment_id: str
    cluster_slug: str | None
    created_at: datetime
    expires_at: datetime | None
    max_uses: int | None
    uses: int
    revoked_at: datetime | None
    last_used_at: datetime | None
    state: str = Field(description="active, expired, used_up or revoked")


class InstallTokenCreated(InstallTokenPublic):
    token: str = Field(description="Shown once; only its hash is stored")


class ApiTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ShortName
    scopes: list[Scope] = Field(min_length=1)
    expires_in_seconds: Annotated[int, Field(gt=0, le=366 * 86400)] | None = None


class ApiTokenPublic(BaseModel):
    id: str
    name: str
    prefix: str
    client_id: str
    environment_id: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    parent_id: str | None = Field(
        default=None,
        description="The token that minted this one; revoking it revoked this one too. None: "
        "made by `console bootstrap`.",
    )


class ApiTokenCreated(ApiTokenPublic):
    token: str


class AgentPublic(BaseModel):
    id: str
    client_id: str
    environment_id: str
    agent_type: str
    name: str
    version: str | None
    instance_id: str | None = Field(description="The process that heartbeat last")
    cluster_slug: str | None = Field(default=None, description="Reported by Kubernetes agents")
    status: AgentStatus
    enrolled_at: datetime
    last_seen_at: datetime | None
    seconds_since_seen: float | None
    can_self_update: bool
    labels: dict[str, str]
    flags: list[AgentFlag]
    refused_connections: int = Field(
        default=0, description="connections the server refused for this record's retired keys"
    )
    last_refused_at: datetime | None = None
    conflict: dict[str, Any] | None = Field(
        default=None, description="The latest enrollment clash on this record's name"
    )
    heartbeat_interval_seconds: float | None
    metrics_interval_seconds: float | None
    sync_interval_seconds: float | None
    released_at: datetime | None
    revoked_at: datetime | None
    credentials_rotated_at: datetime | None


class AgentEventPublic(BaseModel):
    at: datetime
    kind: str
    message: str
    detail: dict[str, Any]


class AgentDetail(AgentPublic):
    evidence: list[dict[str, Any]] = Field(
        description="Identity signals the record carries (kinds and sources, never values)"
    )
    history: list[AgentEventPublic]
    last_metrics: dict[str, Any] | None


class ReleaseAnswer(AgentPublic, ReleaseDecision):
    """``POST /api/v1/fleet/agents/{id}/release-identity[?dry_run=true]``: the record as it is
    (or, in a dry run, would be) once released, and the decision as
    ``contracts.views.ReleaseDecision`` reads it (``agent_id``, ``outcome``, ``message``,
    ``dry_run``). A refusal is a 409 error body with its ``reason``, dry run or not."""


class RotationResult(BaseModel):
    agent_id: str
    public_key: str
    rotated_at: datetime


class Whoami(BaseModel):
    token_id: str
    client_id: str
    environment_id: str
    scopes: list[str]


class PublishedSettings(BaseModel):
    """The Console's windows that other processes must agree with (flows read them here)."""

    identity_quiet_seconds: float = Field(
        description="A record seen within this window is never released or re-bound"
    )
    agent_stale_seconds: float = Field(description="Online: a heartbeat within this timeout")
    rotation_timeout_seconds: float = Field(description="How long rotate-credentials waits")
    enroll_clock_skew_seconds: float = Field(description="Largest accepted signing-clock skew")
    k8s_sync_interval: str = Field(description="The inventory syncInterval the Console expects")
    k8s_sync_interval_seconds: float
    rollout_sweep_seconds: float = Field(description="How often overdue targets are timed out")


class RolloutStart(BaseModel):
    flow_run_id: str | None = None


class RolloutReason(BaseModel):
    reason: str | None = None


class ClusterCreate(BaseModel):
    name: str
    slug: str | None = None


class ClusterWarning(BaseModel):
    kind: str
    message: str


class ClusterAgentView(BaseModel):
    id: str
    name: str
    status_seen_at: datetime | None
    leader: bool | None
    reported_slug: str | None
    sync_interval_seconds: float | None
    version: str | None


class ClusterPublic(BaseModel):
    id: str
    slug: str
    name: str
    environment_id: str
    registered: bool
    created_at: datetime
    first_inventory_at: datetime | None
    last_inventory_at: datetime | None
    kubernetes_version: str | None
    sync_interval_seconds: float | None
    backend_sync_interval_seconds: float
    counts: dict[str, int]
    truncated: dict[str, Any]
    errors: list[str]
    inventory_problems: list[InventoryProblem] = Field(
        default_factory=list,
        description="the last sync's unreadable kinds as facts (errors is the same, as text)",
    )
    agents: list[ClusterAgentView]
    node_agents: int
    warnings: list[ClusterWarning]


class OnboardingChecklist(OnboardingStatus):
    """``GET /api/v1/clusters/{slug}/onboarding``: the onboarding status
    (``contracts.views.OnboardingStatus``) and the cluster's warnings, what the wizard shows."""

    warnings: list[ClusterWarning] = Field(
        default_factory=list, description="The cluster's warnings (see GET /api/v1/clusters/{slug})"
    )
