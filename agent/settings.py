"""The agent's one settings class. Every field is a ``--flag`` and a ``PROXIMA_*`` variable.

Built in :func:`agent.cli.main`, never at import. Command-line values win over the
environment; the environment wins over defaults.

A plain pydantic model reading its own variables (``_environment``), not pydantic-settings'
``BaseSettings``: that package (its sources for dotenv, cloud secret stores, a CLI parser, and
the ``email`` package they pull in) cost the idle agent ~8 MiB of its resident memory, for a
lookup of ``PROXIMA_<FIELD>`` per field. What it did for these fields is kept: names match
case-insensitively, values arrive as text for pydantic's lax parsing (no JSON decoding: every
list- or dict-valued setting parses its own ``a,b`` text), defaults are validated.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from agent.errors import ConfigError
from contracts.bounds import parse_labels
from contracts.durations import format_duration, parse_duration
from contracts.slugs import is_dns_label, slugify
from contracts.vocabulary import AgentType

__all__ = [
    "AgentSettings",
    "Flag",
    "LogFormat",
    "LogLevel",
    "build_settings",
    "default_text",
    "flag_of",
    "flags",
    "is_duration",
    "setting_label",
]

ENV_PREFIX = "PROXIMA_"
DEFAULT_DATA_DIR = Path("/var/lib/proxima-agent")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    PLAIN = "plain"
    JSON = "json"


def _duration(value: Any) -> float:
    if isinstance(value, str | int | float):
        return parse_duration(value)
    raise ValueError("expected a duration like 30s or 5m")


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be greater than zero")
    return value


def parse_names(value: Any) -> tuple[str, ...]:
    """``a,b`` (as the chart joins a list) as a tuple of DNS labels; empty text is none."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names: list[str] = []
    for item in items:
        name = str(item).strip()
        if not name:
            continue
        if not is_dns_label(name):
            raise ValueError(f"{name!r} is not a namespace name (a DNS label)")
        if name not in names:
            names.append(name)
    return tuple(names)


Duration = Annotated[float, BeforeValidator(_duration)]
Labels = Annotated[dict[str, str], BeforeValidator(parse_labels)]
Names = Annotated[tuple[str, ...], BeforeValidator(parse_names)]


def _parse_urls(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value or ())
    return tuple(str(item).strip() for item in items if str(item).strip())


Urls = Annotated[tuple[str, ...], BeforeValidator(_parse_urls)]
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Flag:
    """Marks a setting ``proxima-agent run`` also takes as a flag (``agent.cli`` builds the
    option from the field: its description is the help, its default the default shown).
    ``spelling`` when the flag is not ``--<field-name>``."""

    spelling: str | None = None


def _environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``PROXIMA_<FIELD>`` of every field that is set, by field name (any letter case)."""
    lowered = {k.lower(): v for k, v in (os.environ if environ is None else environ).items()}
    prefix = ENV_PREFIX.lower()
    return {
        name: lowered[prefix + name]
        for name in AgentSettings.model_fields
        if prefix + name in lowered
    }


class AgentSettings(BaseModel):
    """``proxima-agent run`` configuration; see ``docs/agent.md`` for each value.

    ``AgentSettings(**values)`` reads the environment: ``values`` win over it."""

    model_config = ConfigDict(extra="ignore", frozen=True, validate_default=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**{**_environment(), **values})

    agent_type: Annotated[AgentType, Flag()] = Field(
        default=AgentType.HOST, description="Kind of agent"
    )
    agent_name: Annotated[str | None, Flag("--name")] = Field(
        default=None, description="Agent name; default: the hostname"
    )
    data_dir: Annotated[Path, Flag()] = Field(
        default=DEFAULT_DATA_DIR, description="Holds state.json"
    )
    backend_url: Annotated[str | None, Flag()] = Field(default=None, description="Console URL")
    install_token: Annotated[SecretStr | None, Flag()] = Field(
        default=None, description="Install token (shows in ps: prefer env or file)"
    )
    install_token_file: Annotated[Path | None, Flag()] = Field(
        default=None, description="File with the install token, read per attempt"
    )
    host_root: Annotated[Path, Flag()] = Field(
        default=Path("/"), description="Where the host's / is mounted"
    )
    host_proc: Path | None = None
    host_sys: Path | None = None
    heartbeat_interval: Annotated[Duration, Flag()] = Field(
        default=30.0, description="Time between heartbeats, e.g. 30s, 5m"
    )
    metrics_interval: Annotated[Duration, Flag()] = Field(
        default=60.0, description="Time between host-metrics samples"
    )
    host_metrics: Annotated[bool, Flag()] = Field(default=True, description="Publish host metrics")
    health_host: Annotated[str, Flag()] = Field(
        default="127.0.0.1", description="Health server address"
    )
    health_port: Annotated[int, Flag()] = Field(
        default=8181, ge=0, le=65535, description="Health server port; 0 picks a free port"
    )
    log_level: Annotated[LogLevel, Flag()] = Field(default=LogLevel.INFO, description="Log level")
    log_format: Annotated[LogFormat, Flag()] = Field(
        default=LogFormat.PLAIN, description="Log format"
    )
    labels: Annotated[Labels, Flag()] = Field(default_factory=dict, description="k=v,k=v")
    enroll_backoff_max: Annotated[Duration, Flag()] = Field(
        default=60.0, description="Longest enrollment retry wait"
    )
    nats_reconnect_wait: Annotated[Duration, Flag()] = Field(
        default=1.0, description="First wait before reconnecting"
    )
    nats_reconnect_max_wait: Annotated[Duration, Flag()] = Field(
        default=30.0, description="Longest wait between reconnects"
    )
    nats_reconnect_jitter: Annotated[float, Flag()] = Field(
        default=0.2, ge=0.0, le=1.0, description="Random share of each wait, 0-1"
    )
    # Command results are kept until the Console acknowledges them (agent.delivery): how long
    # to wait for an acknowledgement, and the longest pause between attempts.
    result_ack_timeout: Annotated[Duration, Flag()] = Field(
        default=5.0,
        description="How long to wait for the Console to acknowledge a command result",
    )
    result_retry_max: Annotated[Duration, Flag()] = Field(
        default=30.0, description="Longest wait between sends of an unacknowledged result"
    )
    signing_public_key: Annotated[str | None, Flag()] = Field(
        default=None, description="Fleet build-signing key (base64url ed25519)"
    )
    signing_public_key_file: Annotated[Path | None, Flag()] = Field(
        default=None, description="File holding the signing key"
    )
    program_path: Annotated[Path | None, Flag()] = Field(
        default=None, description="The build self_update replaces; default: the running zipapp"
    )
    update_health_timeout: Annotated[Duration, Flag()] = Field(
        default=60.0, description="How long a new build has to become healthy"
    )
    # Where self_update may download from besides the Console's own /api/v1/artifacts/, and
    # the largest build it downloads (refused on Content-Length, cut off past it).
    artifact_url_allow: Urls = ()
    max_artifact_bytes: int = Field(default=512 * 2**20, ge=1)

    # Kubernetes agents (docs/kubernetes-agents.md). Both: the cluster they run in; the slug
    # is derived from the name like the chart derives it when not given.
    cluster_name: str | None = None
    cluster_slug: str | None = Field(default=None, validate_default=True)
    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    # The node monitor: kubelet metrics (token and CA default to the ServiceAccount mount's).
    kubelet_url: str | None = None
    kubelet_insecure_skip_verify: bool = False
    kubelet_token_file: Path | None = None
    kubelet_ca_file: Path | None = None
    # The cluster collector: inventory and leader election.
    sync_interval: Duration = 300.0
    pod_limit: int = Field(default=5000, ge=1)
    exclude_namespaces: Names = ()
    lease_name: str = "proxima-agent-cluster-agent"
    pod_namespace: str | None = None
    # The agent's own pod (downward API), for Kubernetes Events on it (agent/kube_events.py).
    pod_name: str | None = None
    pod_uid: str | None = None
    replicas: int = Field(default=1, ge=1)
    lease_duration: Duration = 15.0
    lease_renew_deadline: Duration = 10.0
    lease_retry_period: Duration = Field(default=2.0, validate_default=True)

    @field_validator(
        "cluster_name", "pod_namespace", "pod_name", "pod_uid", "kubelet_url", mode="before"
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None
        return value.strip() if isinstance(value, str) else value

    @field_validator("lease_name", mode="before")
    @classmethod
    def _default_lease(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return "proxima-agent-cluster-agent"
        return value

    @field_validator("cluster_slug")
    @classmethod
    def _check_cluster_slug(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and value.strip():
            value = value.strip()
            if not is_dns_label(value):
                raise ValueError(
                    f"{value!r} is not a DNS label: use at most 63 lowercase letters, digits "
                    "and '-', starting and ending with a letter or digit"
                )
            return value
        name = info.data.get("cluster_name")
        collector = info.data.get("agent_type") is AgentType.K8S_CLUSTER_COLLECTOR
        if name:
            derived = slugify(name)
            if not derived and collector:
                raise ValueError(
                    f"cluster name {name!r} has no letter or digit to derive a slug from: set "
                    "PROXIMA_CLUSTER_SLUG"
                )
            return derived or None
        if collector:
            raise ValueError(
                "a k8s-cluster-collector needs PROXIMA_CLUSTER_NAME (clusterAgent.clusterName) "
                "or PROXIMA_CLUSTER_SLUG"
            )
        return None

    @field_validator("kubelet_url")
    @classmethod
    def _check_kubelet_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with https:// (or http://)")
        return value.rstrip("/") if value else value

    @field_validator("lease_retry_period")
    @classmethod
    def _check_lease_timing(cls, value: float, info: ValidationInfo) -> float:
        duration = info.data.get("lease_duration")
        deadline = info.data.get("lease_renew_deadline")
        if duration is not None and deadline is not None and not duration > deadline > value > 0:
            raise ValueError(
                "leader election needs PROXIMA_LEASE_DURATION > PROXIMA_LEASE_RENEW_DEADLINE > "
                f"PROXIMA_LEASE_RETRY_PERIOD > 0, got {duration:g}s > {deadline:g}s > {value:g}s"
            )
        return value

    @field_validator("agent_type", "log_level", "log_format", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("agent_name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if len(value) > 253 or not _NAME.match(value):
            raise ValueError(
                "must start with a letter or digit and hold only letters, digits, '.', '_' "
                "and '-' (at most 253)"
            )
        return value

    @field_validator("backend_url")
    @classmethod
    def _check_backend_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @field_validator("install_token")
    @classmethod
    def _blank_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        return SecretStr(value.get_secret_value().strip())

    @field_validator("program_path")
    @classmethod
    def _absolute_program(cls, value: Path | None) -> Path | None:
        if value is None or not str(value).strip():
            return None
        return value.absolute()

    @field_validator(
        "heartbeat_interval",
        "metrics_interval",
        "enroll_backoff_max",
        "update_health_timeout",
        "sync_interval",
        "result_ack_timeout",
        "result_retry_max",
    )
    @classmethod
    def _check_positive(cls, value: float) -> float:
        return _positive(value)

    @field_validator("nats_reconnect_wait", "nats_reconnect_max_wait")
    @classmethod
    def _check_reconnect(cls, value: float) -> float:
        return _positive(value)

    @property
    def name(self) -> str:
        """The configured name, or this machine's hostname."""
        if self.agent_name:
            return self.agent_name
        return socket.gethostname() or "localhost"


def flag_of(field: str) -> str | None:
    """The ``--flag`` of a setting, or ``None`` when only its variable sets it."""
    info = AgentSettings.model_fields[field]
    marks = [m for m in info.metadata if isinstance(m, Flag)]
    if not marks:
        return None
    return marks[0].spelling or "--" + field.replace("_", "-")


def flags() -> dict[str, str]:
    """Every setting ``proxima-agent run`` takes as a flag, in order: field name → ``--flag``."""
    return {name: flag for name in AgentSettings.model_fields if (flag := flag_of(name))}


def default_text(field: str) -> str | None:
    """A setting's default as an operator writes it (``30s``, ``on``, ``host``); ``None`` when it
    has none to show (its description says what happens when unset)."""
    info = AgentSettings.model_fields[field]
    value = info.get_default(call_default_factory=True)
    if value is None or value == {} or value == ():
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, StrEnum):
        return value.value
    if is_duration(field):
        return format_duration(value)
    return str(value)


def is_duration(field: str) -> bool:
    """Whether a setting is a :data:`Duration` (``30s``, ``5m``; seconds once parsed)."""
    info = AgentSettings.model_fields[field]
    return any(isinstance(m, BeforeValidator) and m.func is _duration for m in info.metadata)


def setting_label(field: str) -> str:
    """How the operator spells ``field``: ``--heartbeat-interval / PROXIMA_HEARTBEAT_INTERVAL``,
    or the variable alone for a setting with no flag (``PROXIMA_CLUSTER_NAME``)."""
    variable = f"{ENV_PREFIX}{field.upper()}"
    flag = flag_of(field) if field in AgentSettings.model_fields else None
    return f"{flag} / {variable}" if flag else variable


def build_settings(**cli_values: Any) -> AgentSettings:
    """Settings from ``cli_values`` (``None`` means not given) over the environment."""
    given = {k: v for k, v in cli_values.items() if v is not None}
    try:
        return AgentSettings(**given)
    except ValidationError as e:
        first = e.errors(include_input=False, include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else "settings"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(setting_label(field), message) from None
