"""Who a rollout is for, and who it leaves out up front, with the reason.

A selector decides *scope*: environment, agent types, labels (the cluster is the ``cluster``
label), explicit agent ids and a version range. Agents outside scope are not mentioned again.
Agents in scope are either *eligible* (they will be sent ``self_update``) or *excluded* with a
named reason, so that an agent that could never succeed is reported instead of counted as a
failure against the threshold (the chart page's "Fleet rollouts fail against healthy hosts").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from rollout_policy.errors import DuplicateAgentError
from rollout_policy.ids import AgentId, EnvironmentId
from rollout_policy.versions import (
    ANY_VERSION,
    Version,
    VersionRange,
    parse_version,
    try_parse_version,
)

CLUSTER_LABEL = "cluster"
"""The label that carries an agent's cluster slug; select a cluster with ``{"cluster": slug}``."""

CONTAINER_AGENT_TYPES = frozenset({"k8s-node-monitor", "k8s-cluster-collector"})
"""Agent types that run from a container image: ``helm upgrade`` upgrades them, never a rollout."""


class ExclusionReason(StrEnum):
    """Why an in-scope agent is left out. Declared in precedence order: the first that applies is
    the agent's ``reason``; all that apply are its ``reasons``."""

    REVOKED = "revoked"
    SHARED_IDENTITY = "shared_identity"
    CANNOT_SELF_UPDATE = "cannot_self_update"
    UNKNOWN_VERSION = "unknown_version"
    ALREADY_AT_TARGET = "already_at_target"
    NEWER_THAN_TARGET = "newer_than_target"
    OFFLINE = "offline"


@dataclass(frozen=True)
class AgentSnapshot:
    """What the Console knows about one agent when the rollout is planned."""

    agent_id: AgentId
    environment_id: EnvironmentId
    agent_type: str
    version: str | None
    online: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    revoked: bool = False
    shared_identity: bool = False
    can_self_update: bool = True
    self_update_blocker: str | None = None
    """The agent's own words for why it cannot self-update, e.g. "read-only program path"."""


@dataclass(frozen=True)
class Selector:
    """Which agents a rollout is about. Empty collections mean "any"."""

    environment_id: EnvironmentId
    agent_types: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)
    version_range: VersionRange = ANY_VERSION
    agent_ids: frozenset[AgentId] = frozenset()

    def matches(self, agent: AgentSnapshot) -> bool:
        """Whether ``agent`` is in scope.

        An agent whose version is missing or unparseable matches any version range: it is in
        scope and then excluded as ``unknown_version``, so it is reported rather than hidden.
        """
        if agent.environment_id != self.environment_id:
            return False
        if self.agent_types and agent.agent_type not in self.agent_types:
            return False
        if self.agent_ids and agent.agent_id not in self.agent_ids:
            return False
        if any(agent.labels.get(key) != value for key, value in self.labels.items()):
            return False
        version = try_parse_version(agent.version)
        return version is None or self.version_range.contains(version)


@dataclass(frozen=True)
class Exclusion:
    agent_id: AgentId
    reason: ExclusionReason
    detail: str
    reasons: tuple[ExclusionReason, ...]


@dataclass(frozen=True)
class EligibilityReport:
    """``eligible`` and ``excluded`` are sorted by agent id."""

    target_version: Version
    eligible: tuple[AgentId, ...]
    excluded: tuple[Exclusion, ...]
    out_of_scope_count: int

    @property
    def in_scope_count(self) -> int:
        return len(self.eligible) + len(self.excluded)

    def count_by_reason(self) -> dict[ExclusionReason, int]:
        """Exclusions per primary reason, in precedence order, zero counts left out."""
        counts = Counter(exclusion.reason for exclusion in self.excluded)
        return {reason: counts[reason] for reason in ExclusionReason if counts[reason]}


def _reasons(
    agent: AgentSnapshot, version: Version | None, target: Version, allow_downgrade: bool
) -> list[ExclusionReason]:
    found: list[ExclusionReason] = []
    if agent.revoked:
        found.append(ExclusionReason.REVOKED)
    if agent.shared_identity:
        found.append(ExclusionReason.SHARED_IDENTITY)
    if not agent.can_self_update or agent.agent_type in CONTAINER_AGENT_TYPES:
        found.append(ExclusionReason.CANNOT_SELF_UPDATE)
    if version is None:
        found.append(ExclusionReason.UNKNOWN_VERSION)
    elif version == target:
        found.append(ExclusionReason.ALREADY_AT_TARGET)
    elif version > target and not allow_downgrade:
        found.append(ExclusionReason.NEWER_THAN_TARGET)
    if not agent.online:
        found.append(ExclusionReason.OFFLINE)
    return found


def _detail(
    reason: ExclusionReason, agent: AgentSnapshot, version: Version | None, target: Version
) -> str:
    match reason:
        case ExclusionReason.REVOKED:
            return "agent is revoked"
        case ExclusionReason.SHARED_IDENTITY:
            return "more than one process reports as this agent: give each its own data directory"
        case ExclusionReason.CANNOT_SELF_UPDATE:
            if agent.self_update_blocker:
                return agent.self_update_blocker
            if agent.agent_type in CONTAINER_AGENT_TYPES:
                return "runs from a container image: upgrade it with helm upgrade"
            return "agent declares it cannot self-update"
        case ExclusionReason.UNKNOWN_VERSION:
            if agent.version is None:
                return "agent has not reported a version"
            return f"reported version {agent.version!r} is not a version"
        case ExclusionReason.ALREADY_AT_TARGET:
            return f"already at {version}"
        case ExclusionReason.NEWER_THAN_TARGET:
            return f"runs {version}, newer than the target {target}; a downgrade was not allowed"
        case ExclusionReason.OFFLINE:
            return "agent is offline"


def evaluate_eligibility(
    selector: Selector,
    agents: Iterable[AgentSnapshot],
    target_version: str | Version,
    *,
    allow_downgrade: bool = False,
) -> EligibilityReport:
    """Split ``agents`` into eligible, excluded (with reasons) and out of scope.

    Raises :class:`~rollout_policy.errors.VersionError` for an unparseable target and
    :class:`~rollout_policy.errors.DuplicateAgentError` if an agent id appears twice.
    """
    target = parse_version(target_version) if isinstance(target_version, str) else target_version
    seen: set[AgentId] = set()
    eligible: list[AgentId] = []
    excluded: list[Exclusion] = []
    out_of_scope = 0
    for agent in agents:
        if agent.agent_id in seen:
            raise DuplicateAgentError(agent.agent_id)
        seen.add(agent.agent_id)
        if not selector.matches(agent):
            out_of_scope += 1
            continue
        version = try_parse_version(agent.version)
        reasons = _reasons(agent, version, target, allow_downgrade)
        if not reasons:
            eligible.append(agent.agent_id)
            continue
        excluded.append(
            Exclusion(
                agent_id=agent.agent_id,
                reason=reasons[0],
                detail=_detail(reasons[0], agent, version, target),
                reasons=tuple(reasons),
            )
        )
    return EligibilityReport(
        target_version=target,
        eligible=tuple(sorted(eligible)),
        excluded=tuple(sorted(excluded, key=lambda exclusion: exclusion.agent_id)),
        out_of_scope_count=out_of_scope,
    )
