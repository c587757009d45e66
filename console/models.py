"""Database tables. One family of classes per entity; API shapes live in ``schemas.py``."""

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, TypeAdapter
from sqlalchemy import JSON, BigInteger, Column, Index, LargeBinary, Table, UniqueConstraint
from sqlmodel import Field, SQLModel

from console.core.clock import utcnow
from contracts.bounds import MAX_IDENTIFIER, MAX_NAME, MAX_TEXT, MAX_VERSION_LENGTH
from contracts.vocabulary.rollouts import (
    DEFAULT_WAVE_TIMEOUT_SECONDS,
    RolloutState,
    TargetStatus,
)


def table_of(model: type[SQLModel]) -> Table:
    """A table model's Core ``Table`` (for the hot paths that write with Core statements)."""
    table: Table = model.__table__  # type: ignore[attr-defined]
    return table


def new_id() -> str:
    return uuid.uuid4().hex


class PlannedWave(BaseModel):
    """One wave of ``Rollout.waves`` as stored (its targets are ``RolloutTarget`` rows)."""

    index: int
    kind: str
    size: int


PLANNED_WAVES = TypeAdapter(list[PlannedWave])
"""Reads and writes ``Rollout.waves``."""


class Client(SQLModel, table=True):
    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    name: str = Field(unique=True, max_length=128)
    created_at: datetime = Field(default_factory=utcnow)


class Environment(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("client_id", "name", name="uq_environment_client_name"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    name: str = Field(max_length=128)
    created_at: datetime = Field(default_factory=utcnow)


class TokenBase(SQLModel):
    """The columns every token table has: a secret shown once, of which only the SHA-256 is
    stored, bound to a client and an environment, that expires, is revoked and was minted by
    an API token."""

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    environment_id: str = Field(foreign_key="environment.id", index=True, max_length=32)
    name: str = Field(max_length=128)
    token_hash: str = Field(unique=True, max_length=64)
    prefix: str = Field(max_length=16)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    # The API token that minted this one (None: made by ``console bootstrap``, or an install
    # token made before migration 0010). Revoking a token revokes every token it minted, and
    # theirs (``services.tokens``); a child's expiry is never later than its parent's.
    parent_id: str | None = Field(default=None, index=True, max_length=32)


class ApiToken(TokenBase, table=True):
    """A bearer token for people and flows, with its scopes."""

    __tablename__ = "api_token"

    scopes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


class WebSession(SQLModel, table=True):
    """A signed-in browser (``console.web.sessions``). The cookie holds a random secret; the row
    is named by its SHA-256, so a reader of the database cannot use it."""

    __tablename__ = "web_session"

    id: str = Field(primary_key=True, max_length=64)
    token_id: str = Field(foreign_key="api_token.id", index=True, max_length=32)
    created_at: datetime = Field(index=True)
    seen_at: datetime
    expires_at: datetime = Field(index=True)
    flashes: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    # Secrets shown once to this session (tokens minted here), sealed with a key derived from
    # the cookie's secret: the database alone cannot open them.
    sealed: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))


class InstallToken(TokenBase, table=True):
    """What an agent presents to enroll: bound to a cluster or not, used a counted number of
    times."""

    __tablename__ = "install_token"

    cluster_slug: str | None = Field(default=None, max_length=63)
    max_uses: int | None = None
    uses: int = 0


# The status index: the fleet list's status ranges name it to SQLite (``services.fleet``).
ENV_LAST_SEEN = "ix_agent_env_last_seen"


class Agent(SQLModel, table=True):
    """One enrolled identity. Unique on (environment, agent_type, name)."""

    __table_args__ = (
        UniqueConstraint(
            "environment_id", "agent_type", "name", name="uq_agent_environment_type_name"
        ),
        # Keys are unique across all records: one key, one identity, one revocation.
        Index("ix_agent_nats_public_key", "nats_public_key", unique=True),
        # The fleet list filters and counts in SQL (migration 0010): status (covered: the last
        # sign of life, revoked, released),
        # the version filter and the fleet's version list.
        Index(
            ENV_LAST_SEEN,
            "environment_id",
            "last_seen_at",
            "revoked_at",
            "nats_public_key",
        ),
        Index("ix_agent_env_version", "environment_id", "version"),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    environment_id: str = Field(foreign_key="environment.id", index=True, max_length=32)
    agent_type: str = Field(max_length=32)
    name: str = Field(max_length=MAX_NAME)
    nats_public_key: str | None = Field(default=None, max_length=64)
    version: str | None = Field(default=None, max_length=MAX_VERSION_LENGTH)
    instance_id: str | None = Field(default=None, max_length=MAX_IDENTIFIER)
    can_self_update: bool = True
    self_update_blocker: str | None = Field(
        default=None,
        max_length=32,
        description="a CommandFailureKind: why it cannot self-update (from heartbeats)",
    )
    labels: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    install_token_id: str | None = Field(default=None, max_length=32)
    enrolled_at: datetime = Field(default_factory=utcnow)
    last_seen_at: datetime | None = None
    last_heartbeat_at: datetime | None = None
    heartbeat_interval_seconds: float | None = None
    metrics_interval_seconds: float | None = None
    sync_interval_seconds: float | None = None
    uptime_seconds: float | None = None
    last_metrics: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    released_at: datetime | None = None
    revoked_at: datetime | None = None
    credentials_rotated_at: datetime | None = None
    # Reported by the collector; may exceed 63 (old charts did not bound it): stored as is.
    cluster_slug: str | None = Field(default=None, max_length=MAX_NAME, index=True)
    leader: bool | None = None
    shared_identity_since: datetime | None = None
    version_flapping_since: datetime | None = None
    last_conflict_at: datetime | None = None
    last_conflict_reason: str | None = Field(default=None, max_length=64)
    conflict_count: int = 0
    rebound_at: datetime | None = Field(
        default=None, description="last quiet re-bind onto another machine (flag ``rebound``)"
    )


class AgentEvidence(SQLModel, table=True):
    """An identity signal a record carries, stored as SHA-256 of ``kind:value``.

    machine-id is confidential by systemd's own rules, so only its hash is kept; matching needs
    nothing more.
    """

    __tablename__ = "agent_evidence"
    __table_args__ = (
        UniqueConstraint("agent_id", "kind", "value_hash", name="uq_evidence_agent_kind_value"),
    )

    id: int | None = Field(default=None, primary_key=True)
    agent_id: str = Field(foreign_key="agent.id", index=True, max_length=32)
    kind: str = Field(max_length=32)
    value_hash: str = Field(max_length=64)
    source: str = Field(max_length=32, description="enrollment or credential_renewal")
    first_seen_at: datetime = Field(default_factory=utcnow)
    last_seen_at: datetime = Field(default_factory=utcnow)


class AgentEvent(SQLModel, table=True):
    """History of a record: enrollments, re-binds, conflicts, releases, rotations, revocation."""

    __tablename__ = "agent_event"

    id: int | None = Field(default=None, primary_key=True)
    agent_id: str = Field(foreign_key="agent.id", index=True, max_length=32)
    at: datetime = Field(default_factory=utcnow, index=True)
    kind: str = Field(max_length=48)
    message: str = Field(max_length=1024)
    detail: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class CredentialRotation(SQLModel, table=True):
    __tablename__ = "credential_rotation"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    agent_id: str = Field(foreign_key="agent.id", index=True, max_length=32)
    nonce: str = Field(unique=True, max_length=128)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    completed_at: datetime | None = None
    new_public_key: str | None = Field(default=None, max_length=64)


class Artifact(SQLModel, table=True):
    """A signed build of the agent program, hosted by the Console or referenced by URL. One per
    (environment, version, sha256): the same build uploaded again is the same artifact."""

    __table_args__ = (
        UniqueConstraint("environment_id", "version", "sha256", name="uq_artifact_identity"),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    environment_id: str = Field(foreign_key="environment.id", index=True, max_length=32)
    version: str = Field(max_length=64)
    url: str = Field(max_length=2048)
    sha256: str = Field(max_length=64)
    signature: str = Field(max_length=256)
    size_bytes: int | None = None
    hosted: bool = False
    created_at: datetime = Field(default_factory=utcnow)


class ArtifactBlob(SQLModel, table=True):
    """The bytes of a hosted build, by SHA-256, in the database so that every Console replica
    serves them (``console.services.artifact_blobs``); its ``ArtifactChunk`` rows hold them."""

    __tablename__ = "artifact_blob"

    sha256: str = Field(primary_key=True, max_length=64)
    size_bytes: int
    chunk_count: int
    created_at: datetime = Field(default_factory=utcnow)


class ArtifactChunk(SQLModel, table=True):
    """One piece (at most ``artifact_blobs.CHUNK_BYTES``) of a build, in order by ``seq``."""

    __tablename__ = "artifact_chunk"

    sha256: str = Field(foreign_key="artifact_blob.sha256", primary_key=True, max_length=64)
    seq: int = Field(primary_key=True)
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class Lease(SQLModel, table=True):
    """Who does a piece of background work now (``console.services.leases``): one row per job,
    held by one Console replica until ``expires_at``."""

    name: str = Field(primary_key=True, max_length=64)
    holder: str = Field(max_length=64)
    expires_at: datetime
    acquired_at: datetime = Field(default_factory=utcnow)


class Rollout(SQLModel, table=True):
    """A version rolled across a selection of agents in waves, with failure criteria.

    The wave plan and the exclusions are decided once, when the rollout is created, and kept:
    a re-run after a crash follows the same plan, whatever agents came or went since.
    """

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    environment_id: str = Field(foreign_key="environment.id", index=True, max_length=32)
    name: str = Field(max_length=128)
    target_version: str = Field(max_length=64)
    artifact: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    selector: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    wave_spec: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    criteria: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    waves: list[dict[str, Any]] = Field(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description="PlannedWave items: read and written through PLANNED_WAVES",
    )
    exclusions: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )
    wave_timeout_seconds: float = DEFAULT_WAVE_TIMEOUT_SECONDS
    seed: str = Field(max_length=64)
    state: str = Field(default=RolloutState.PENDING.value, max_length=16, index=True)
    state_reason: str | None = Field(default=None, max_length=1024)
    threshold: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    baseline: dict[str, int] = Field(
        default_factory=dict,
        sa_column=Column(JSON, nullable=False),
        description="result counts when last resumed: only later results are judged",
    )
    flow_run_id: str | None = Field(default=None, max_length=64)
    driver_lost_at: datetime | None = Field(
        default=None, description="when the sweep found the flow run gone (rollouts.drivers)"
    )
    driver_lost_reason: str | None = Field(
        default=None, max_length=16, description="a DriverLostReason"
    )
    driver_lost_detail: str | None = Field(default=None, max_length=512)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    stalled_at: datetime | None = Field(
        default=None, description="when it last stalled or was paused (RolloutPublic.halted_at)"
    )
    finished_at: datetime | None = None


class RolloutTarget(SQLModel, table=True):
    """One agent in a rollout. At most one command is ever sent per (rollout, agent)."""

    __tablename__ = "rollout_target"
    __table_args__ = (
        UniqueConstraint("rollout_id", "agent_id", name="uq_rollout_target_agent"),
        Index("ix_rollout_target_rollout_wave", "rollout_id", "wave"),
        # the timeout sweep: dispatched targets past their deadline (migration 0010)
        Index("ix_rollout_target_status_deadline", "status", "deadline_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    rollout_id: str = Field(foreign_key="rollout.id", max_length=32)
    agent_id: str = Field(foreign_key="agent.id", index=True, max_length=32)
    agent_name: str = Field(max_length=253)
    wave: int
    status: str = Field(default=TargetStatus.PENDING.value, max_length=16)
    command_id: str | None = Field(default=None, max_length=32, unique=True)
    old_version: str | None = Field(default=None, max_length=MAX_VERSION_LENGTH)
    new_version: str | None = Field(default=None, max_length=MAX_VERSION_LENGTH)
    error: str | None = Field(default=None, max_length=MAX_TEXT)
    failure_kind: str | None = Field(
        default=None, max_length=32, description="a CommandFailureKind, from the agent's result"
    )
    dispatched_at: datetime | None = None
    deadline_at: datetime | None = None
    finished_at: datetime | None = None


class NatsRevocation(SQLModel, table=True):
    """A key taken away (released, rotated away, revoked, replaced by a re-bind). Its JWTs are
    refused by the server from ``revoked_at`` on, and its live connection is cut."""

    __tablename__ = "nats_revocation"

    public_key: str = Field(primary_key=True, max_length=64)
    agent_id: str = Field(foreign_key="agent.id", index=True, max_length=32)
    revoked_at: int = Field(description="unix seconds")
    reason: str = Field(max_length=32)
    refused_attempts: int = Field(
        default=0, description="connections the server refused for this key since"
    )
    last_refused_at: datetime | None = None


class NatsAccount(SQLModel, table=True):
    """A NATS signing key held once, for every Console replica: the operator (``operator``), the
    system account (``system``), one account per environment (``env:<environment id>``) and, on
    installs older than 0010, the single account all agents used before (``fleet``). Created on
    first use; the primary key settles a race between replicas (the loser reads the winner's
    row), so every replica signs with the same keys. Back it up with the database."""

    __tablename__ = "nats_account"

    name: str = Field(primary_key=True, max_length=64)
    environment_id: str | None = Field(
        default=None, foreign_key="environment.id", index=True, max_length=32
    )
    public_key: str = Field(unique=True, max_length=64)
    seed: str = Field(max_length=128, description="the nkey seed (secret)")
    created_at: datetime = Field(default_factory=utcnow)


class Cluster(SQLModel, table=True):
    """A Kubernetes cluster as the Console records it. ``slug`` is what inventory matches on."""

    __table_args__ = (UniqueConstraint("environment_id", "slug", name="uq_cluster_env_slug"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    environment_id: str = Field(foreign_key="environment.id", index=True, max_length=32)
    slug: str = Field(max_length=MAX_NAME)
    name: str = Field(max_length=MAX_NAME)
    registered: bool = Field(
        default=True, description="False when first seen in inventory, never recorded by onboarding"
    )
    created_at: datetime = Field(default_factory=utcnow)
    first_inventory_at: datetime | None = None
    last_inventory_at: datetime | None = None
    last_inventory_agent_id: str | None = Field(default=None, max_length=32)
    reported_name: str | None = Field(default=None, max_length=MAX_NAME)
    kubernetes_version: str | None = Field(default=None, max_length=MAX_VERSION_LENGTH)
    sync_interval_seconds: float | None = None
    counts: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    truncated: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    errors: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    inventory_problems: list[dict[str, Any]] = Field(
        default_factory=list,
        sa_column=Column(JSON, nullable=False),
        description="the last sync's problems as facts (contracts.inventory.InventoryProblem)",
    )


class ClusterInventory(SQLModel, table=True):
    """The latest inventory snapshot of a cluster (objects by kind)."""

    __tablename__ = "cluster_inventory"

    cluster_id: str = Field(foreign_key="cluster.id", primary_key=True, max_length=32)
    collected_at: datetime
    objects: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class AuditRun(SQLModel, table=True):
    """One fleet audit (the fleet-audit flow posts its findings here)."""

    __tablename__ = "audit_run"

    id: str = Field(default_factory=new_id, primary_key=True, max_length=32)
    client_id: str = Field(foreign_key="client.id", index=True, max_length=32)
    environment_id: str = Field(foreign_key="environment.id", index=True, max_length=32)
    flow_run_id: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, index=True)
    summary: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class AuditFinding(SQLModel, table=True):
    __tablename__ = "audit_finding"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="audit_run.id", index=True, max_length=32)
    name: str = Field(max_length=64)
    severity: str = Field(max_length=16)
    subject_kind: str = Field(max_length=32)
    subject_id: str | None = Field(default=None, max_length=253)
    subject_name: str | None = Field(default=None, max_length=253)
    message: str = Field(max_length=2048)
    fix: str | None = Field(default=None, max_length=1024)
    detail: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class RateCounter(SQLModel, table=True):
    """One rate-limit counter (``services.rate_limits``), shared by every Console replica: the
    hits of the current fixed window and of the one before it (a sliding-window estimate)."""

    __tablename__ = "rate_counter"

    key: str = Field(primary_key=True, max_length=128)
    slot: int = Field(sa_column=Column(BigInteger, nullable=False))
    count: int = 0
    previous: int = 0
    expires_at: float = Field(index=True, description="epoch seconds: the row is useless after")
