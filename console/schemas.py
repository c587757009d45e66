"""The Console's own API shapes: what routes accept, and the answers no other process reads.
What other processes read has its one home in ``contracts.views`` (agents, clusters, onboarding,
settings, release decisions) and ``contracts.rollouts``: routes answer with those classes, and a
shape here only extends one (``OnboardingChecklist``, ``PublishedSettings``, ``ReleaseAnswer``).
The web pages render these same models."""

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from contracts.bounds import text
from contracts.views import (
    AgentView,
    ClusterWarningView,
    ConsoleSettingsView,
    CredentialRotation,
    OnboardingStatus,
    ReleaseDecision,
)
from contracts.vocabulary import Scope

ShortName = Annotated[str, text(128, min_length=1)]


class InstallTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ShortName = "install token"
    expires_in_seconds: Annotated[int, Field(gt=0, le=366 * 86400)] | None = None
    max_uses: Annotated[int, Field(gt=0, le=1_000_000)] | None = None
    cluster_slug: Annotated[str, text(63)] | None = None


class TokenPublic(BaseModel):
    """What every token's answer shows (``console.models.TokenBase``, less the hash)."""

    id: str
    name: str
    prefix: str
    environment_id: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    parent_id: str | None = Field(
        default=None,
        description="The API token that minted this one; revoking it (or a token above it) "
        "revoked this one too. None: made by `console bootstrap`, or before that link was "
        "recorded.",
    )


class InstallTokenPublic(TokenPublic):
    cluster_slug: str | None
    max_uses: int | None
    uses: int
    state: str = Field(description="active, expired, used_up or revoked")


class InstallTokenCreated(InstallTokenPublic):
    token: str = Field(description="Shown once; only its hash is stored")


class ApiTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ShortName
    scopes: list[Scope] = Field(min_length=1, max_length=64)
    expires_in_seconds: Annotated[int, Field(gt=0, le=366 * 86400)] | None = None


class ApiTokenPublic(TokenPublic):
    client_id: str
    scopes: list[str]


class ApiTokenCreated(ApiTokenPublic):
    token: str


class ReleaseAnswer(AgentView, ReleaseDecision):
    """``POST /api/v1/fleet/agents/{id}/release-identity[?dry_run=true]``: the record as it is
    (or, in a dry run, would be) once released, and the decision as
    ``contracts.views.ReleaseDecision`` reads it (``agent_id``, ``outcome``, ``message``,
    ``dry_run``). A refusal is a 409 error body with its ``reason``, dry run or not."""


class RotationResult(CredentialRotation):
    """``POST /api/v1/fleet/agents/{id}/rotate-credentials`` (``contracts.views`` reads it)."""


class Whoami(BaseModel):
    token_id: str
    client_id: str
    environment_id: str
    scopes: list[str]


class PublishedSettings(ConsoleSettingsView):
    """``GET /api/v1/settings``: the windows the flows read
    (``contracts.views.ConsoleSettingsView``) and the Console's other timings that agents and
    flows must agree with."""

    enroll_clock_skew_seconds: float = Field(description="Largest accepted signing-clock skew")
    k8s_sync_interval: str = Field(description="The inventory syncInterval the Console expects")
    rollout_sweep_seconds: float = Field(description="How often overdue targets are timed out")


class RolloutStart(BaseModel):
    flow_run_id: UUID | None = Field(
        default=None,
        description="The calling flow run's Prefect id: recorded only when the Console started "
        "that run, or Prefect says it is a fleet-rollout run started for this rollout",
    )


class RolloutReason(BaseModel):
    reason: Annotated[str, text(1024)] | None = None


class ClusterCreate(BaseModel):
    name: Annotated[str, text(253, min_length=1)]
    slug: Annotated[str, text(63)] | None = None


class OnboardingChecklist(OnboardingStatus):
    """``GET /api/v1/clusters/{slug}/onboarding``: the onboarding status
    (``contracts.views.OnboardingStatus``) and the cluster's warnings, what the wizard shows."""

    warnings: list[ClusterWarningView] = Field(
        default_factory=list, description="The cluster's warnings (see GET /api/v1/clusters/{slug})"
    )
