"""What the Console serves about agents, clusters, onboarding, its settings and identity
releases: the read shapes every process may parse (the flows' typed client, the agent's
diagnostics, tests).

Each matches, field for field, what the Console answers today (``console/schemas.py``,
``console/clusters.py``, ``console/web/onboarding.py``); ``tests/contracts`` validates real
payloads against them. Unknown fields are ignored, so a newer Console's additions still parse.
"""

from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from contracts.bounds import Identifier, SqlIndex, parse_labels, text
from contracts.enrollment import PublicKey
from contracts.inventory import InventoryProblem
from contracts.vocabulary import AgentFlag, AgentStatus, AgentType
from contracts.vocabulary.identities import ReleaseOutcome
from contracts.vocabulary.reasons import ErrorReason

T = TypeVar("T")


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Page(_View, Generic[T]):
    """One page of a list: ``total`` counts every match, not only ``items`` — up to a cap
    where the list says so (``total_capped``: there are more than ``total``)."""

    items: list[T]
    total: int
    total_capped: bool = False
    limit: int
    offset: int


# --- agents -----------------------------------------------------------------------------------


class EnrollmentConflictView(_View):
    """The latest enrollment clash on a record's name."""

    reason: str | None = Field(description="an ErrorReason: name_in_use, identity_mismatch, …")
    last_at: str = Field(description="ISO 8601")
    count: int


class AgentView(_View):
    """``GET /api/v1/fleet/agents`` items; ``status`` and ``flags`` are computed when read."""

    id: str
    client_id: str
    environment_id: str
    agent_type: AgentType
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
    conflict: EnrollmentConflictView | None = Field(
        default=None, description="The latest enrollment clash on this record's name"
    )
    heartbeat_interval_seconds: float | None
    metrics_interval_seconds: float | None
    sync_interval_seconds: float | None
    released_at: datetime | None
    revoked_at: datetime | None
    credentials_rotated_at: datetime | None


AgentPage = Page[AgentView]

MAX_LIST_PAGE = 1000
"""The most agents one ``GET /api/v1/fleet/agents`` page holds."""


def _labels_text(value: str) -> str:
    parse_labels(value)  # refused here, with its reason, rather than matching nothing
    return value


class AgentFilter(BaseModel):
    """Which agents ``GET /api/v1/fleet/agents`` lists, and which page: its query parameters,
    what the service filters with, what the flows' client and the web page send. An empty
    value is no filter (a form's "any")."""

    model_config = ConfigDict(extra="ignore")

    agent_type: AgentType | None = None
    status: AgentStatus | None = None
    version: Annotated[str, text(64)] | None = Field(default=None, description="exact")
    name: Annotated[str, text(253)] | None = Field(default=None, description="substring")
    flag: AgentFlag | None = None
    label: Annotated[str, text(2048), AfterValidator(_labels_text)] | None = Field(
        default=None, description="k=v (or k=v,k2=v2: every one)"
    )
    limit: Annotated[int, Field(ge=1, le=MAX_LIST_PAGE)] = 100
    offset: SqlIndex = 0

    @field_validator("agent_type", "status", "version", "name", "flag", "label", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @property
    def labels(self) -> dict[str, str]:
        """``label`` as pairs every listed agent carries."""
        return parse_labels(self.label)

    def query(self) -> dict[str, str]:
        """The query string's parameters: the filters set, and the page."""
        return {k: str(v) for k, v in self.model_dump(mode="json", exclude_none=True).items()}


class AgentEventView(_View):
    at: datetime
    kind: str
    message: str
    detail: dict[str, Any]


class EvidenceView(_View):
    """An identity signal a record carries: its kind and source, never its value."""

    kind: str
    source: str
    first_seen_at: datetime
    last_seen_at: datetime


class AgentDetailView(AgentView):
    """``GET /api/v1/fleet/agents/{id}``."""

    evidence: list[EvidenceView]
    history: list[AgentEventView]
    last_metrics: dict[str, Any] | None


class CredentialRotation(_View):
    """``POST /api/v1/fleet/agents/{id}/rotate-credentials``: the key the agent now holds."""

    agent_id: Identifier
    public_key: PublicKey
    rotated_at: datetime


# --- clusters ---------------------------------------------------------------------------------


class ClusterWarningView(_View):
    kind: str = Field(
        description="sync_interval_drift, slug_mismatch, unregistered, inventory_truncated or "
        "inventory_errors"
    )
    message: str


class ClusterAgentView(_View):
    """A cluster collector linked to the cluster."""

    id: str
    name: str
    status_seen_at: datetime | None
    leader: bool | None
    reported_slug: str | None
    sync_interval_seconds: float | None
    version: str | None


class ClusterView(_View):
    """``GET /api/v1/clusters/{slug}``; ``warnings`` are computed when read."""

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
    warnings: list[ClusterWarningView]


# --- onboarding -------------------------------------------------------------------------------


class OnboardingCause(_View):
    """A likely cause of a pending gate and its fix (the chart page's Common Issues rows)."""

    issue: str
    cause: str
    fix: str


class OnboardingCheck(_View):
    key: str = Field(description="enrollment, heartbeat or inventory")
    title: str
    ok: bool
    detail: str
    causes: list[OnboardingCause]


class OnboardingStatus(_View):
    """The onboarding gates of one cluster: enrolled, heartbeat, first inventory."""

    slug: str
    checks: list[OnboardingCheck]
    done: bool
    node_agents: int
    nodes: int | None
    tokens_usable: int


# --- settings and identity releases -----------------------------------------------------------


class ConsoleSettingsView(_View):
    """The Console's windows that the flows must not copy: they read them here."""

    quiet_window_seconds: float = Field(
        description="PROXIMA_IDENTITY_QUIET_SECONDS: how long a record must be without a sign of "
        "life before enrollment re-binds it or release-identity frees it"
    )
    stale_after_seconds: float = Field(
        description="PROXIMA_AGENT_STALE_SECONDS: no heartbeat for longer than this is offline"
    )
    k8s_sync_interval_seconds: float = Field(
        description="PROXIMA_K8S_SYNC_INTERVAL: the backend's copy of clusterAgent.syncInterval"
    )
    rotation_timeout_seconds: float = Field(
        description="How long rotate-credentials waits for the agent's proof"
    )


class ReleaseDecision(_View):
    """What release-identity does (``released``, ``already_released``, ``refused``) or, in a
    dry run, would do (``would_release``) with one record; ``reason`` is set when refused."""

    agent_id: str
    outcome: ReleaseOutcome
    reason: ErrorReason | None = None
    message: str = ""
    dry_run: bool = True
