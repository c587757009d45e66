"""The plan for moving the node agent's ``hostDataDir`` on a live cluster.

Moving the directory makes each DaemonSet pod abandon the identity it had and enroll again as a
``k8s-node-monitor`` named after its node. Whether that works depends on what already holds that
name (the chart's page's "Changing hostDataDir on a live cluster is not always safe"):

- ``fresh``: nothing holds the name; the pod enrolls a new record.
- ``host_agent_present``: a host agent runs there and no node-monitor record holds the name (the
  pod had adopted the host's identity); the name is free and the move is what fixes the node.
- ``rebind_possible``: a node-monitor record holds the name, the pod can read the host identity
  (host-root mount), the record carries identity evidence and will be quiet once the pod moves;
  enrollment re-binds the pod to it after the quiet window, keeping its id. A released record
  is re-bound by the pod's next enrollment, whatever the pod presents.
- ``needs_release``: a node-monitor record holds the name and one of those does not hold; the pod
  gets 409 until the record is released, and for a revoked record or one something else keeps
  alive, not even then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from contracts.vocabulary import AgentType
from contracts.vocabulary.reasons import ErrorReason
from rollout_policy.errors import MigrationInputError
from rollout_policy.identities import DEFAULT_QUIET_WINDOW_SECONDS, is_quiet, rebind_refusals
from rollout_policy.ids import AgentId, NodeName

__all__ = [
    "DEFAULT_QUIET_WINDOW_SECONDS",
    "NODE_MONITOR_TYPE",
    "AgentRecord",
    "MigrationNode",
    "MigrationPlan",
    "MigrationRow",
    "NodeClass",
    "ReleaseReason",
    "plan_hostdatadir_migration",
]

NODE_MONITOR_TYPE = AgentType.K8S_NODE_MONITOR.value


class NodeClass(StrEnum):
    FRESH = "fresh"
    HOST_AGENT_PRESENT = "host_agent_present"
    REBIND_POSSIBLE = "rebind_possible"
    NEEDS_RELEASE = "needs_release"


class ReleaseReason(StrEnum):
    """Why a node cannot re-bind by itself. Declared in the order they are reported: the ones
    that also block a release come first."""

    REVOKED = "revoked"
    NOT_QUIET = "not_quiet"
    NO_HOST_IDENTITY = "no_host_identity"
    NO_EVIDENCE = "no_evidence"


_RELEASE_REASONS = {
    ErrorReason.AGENT_REVOKED: ReleaseReason.REVOKED,
    ErrorReason.NAME_IN_USE: ReleaseReason.NOT_QUIET,
    ErrorReason.IDENTITY_MISMATCH: ReleaseReason.NO_HOST_IDENTITY,
    ErrorReason.NO_IDENTITY_EVIDENCE: ReleaseReason.NO_EVIDENCE,
}
"""The enrollment refusal each plan reason predicts (the pod presents the host's signals only
when it can read the host identity)."""


@dataclass(frozen=True)
class AgentRecord:
    """A Console record held under a node's name. ``last_seen_age_seconds`` is ``None`` for a
    record that never reported; ``shared_identity`` is the Console's two-instances finding."""

    agent_id: AgentId
    agent_type: str
    last_seen_age_seconds: float | None
    has_identity_evidence: bool
    revoked: bool = False
    shared_identity: bool = False
    released: bool = False
    """Holds no key (release-identity freed it): the next enrollment re-binds it."""


@dataclass(frozen=True)
class MigrationNode:
    """A node, the records under its name, and what the flow observed on it."""

    name: NodeName
    records: tuple[AgentRecord, ...] = ()
    host_agent_running: bool = False
    host_identity_readable: bool = False
    """Whether the DaemonSet pod mounts the host root and can read every kind of identity
    evidence the record holds (machine-id, and the root-only DMI uuid where it holds one)."""


@dataclass(frozen=True)
class MigrationRow:
    """One node's line in the plan. ``agent_id`` is the node-monitor record holding the node's
    name, if any; ``reasons`` are empty unless the class is ``needs_release``."""

    node: NodeName
    node_class: NodeClass
    agent_id: AgentId | None
    reasons: tuple[ReleaseReason, ...]
    host_agent_running: bool
    host_identity_readable: bool
    action: str
    releasable: bool
    """For ``needs_release``: whether the release API will accept it once the record is quiet."""

    def as_table_row(self) -> dict[str, str]:
        """Strings keyed by column, for a Prefect table artifact or a console table."""
        return {
            "node": self.node,
            "class": self.node_class.value,
            "record": self.agent_id or "-",
            "host agent": "yes" if self.host_agent_running else "no",
            "host identity": "readable" if self.host_identity_readable else "not readable",
            "why": ", ".join(reason.value for reason in self.reasons) or "-",
            "action": self.action,
        }


@dataclass(frozen=True)
class MigrationPlan:
    rows: tuple[MigrationRow, ...]
    quiet_window_seconds: float

    def count_by_class(self) -> dict[NodeClass, int]:
        counts = Counter(row.node_class for row in self.rows)
        return {node_class: counts[node_class] for node_class in NodeClass}

    def rows_of(self, node_class: NodeClass) -> tuple[MigrationRow, ...]:
        return tuple(row for row in self.rows if row.node_class is node_class)

    @property
    def blocked(self) -> tuple[MigrationRow, ...]:
        """Nodes that need an operator before the apply can finish: revoked or kept alive."""
        return tuple(
            row
            for row in self.rows
            if row.node_class is NodeClass.NEEDS_RELEASE and not row.releasable
        )

    def table(self) -> list[dict[str, str]]:
        return [row.as_table_row() for row in self.rows]


def _window_text(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def _classify(node: MigrationNode, window: float) -> MigrationRow:
    monitors = [r for r in node.records if r.agent_type == NODE_MONITOR_TYPE]
    if len(monitors) > 1:
        ids = ", ".join(sorted(r.agent_id for r in monitors))
        raise MigrationInputError(
            node.name,
            f"{len(monitors)} {NODE_MONITOR_TYPE} records ({ids}); enrollment keeps one per "
            "environment and name, so pass one environment's records",
        )
    if not monitors:
        if node.host_agent_running:
            return _row(
                node,
                NodeClass.HOST_AGENT_PRESENT,
                f"none: enrolls as {NODE_MONITOR_TYPE} under a free name",
            )
        return _row(node, NodeClass.FRESH, "none: enrolls a new record")
    return _classify_record(node, monitors[0], window)


def _row(
    node: MigrationNode,
    node_class: NodeClass,
    action: str,
    agent_id: AgentId | None = None,
    reasons: tuple[ReleaseReason, ...] = (),
    releasable: bool = True,
) -> MigrationRow:
    return MigrationRow(
        node=node.name,
        node_class=node_class,
        agent_id=agent_id,
        reasons=reasons,
        host_agent_running=node.host_agent_running,
        host_identity_readable=node.host_identity_readable,
        action=action,
        releasable=releasable,
    )


def _classify_record(node: MigrationNode, record: AgentRecord, window: float) -> MigrationRow:
    """The row of a node whose name a node-monitor record holds."""
    wait = _window_text(window)

    if record.released and not record.revoked:
        # The release is the operator's override: the next enrollment under the name re-binds
        # the record whatever the pod presents (rollout_policy.identities, rule 4).
        return _row(
            node,
            NodeClass.REBIND_POSSIBLE,
            f"none: {record.agent_id} is released; the pod re-binds to it and its identity "
            "evidence becomes the pod's",
            agent_id=record.agent_id,
        )
    # On a DaemonSet-only node the pod itself is what keeps the record alive, and it stops
    # when it moves. Where a host agent runs, the pod was on the host's identity, so anything
    # recently seen as the node-monitor record is a second live process.
    will_be_quiet = not record.shared_identity and (
        is_quiet(record.last_seen_age_seconds, window) or not node.host_agent_running
    )
    refusals = rebind_refusals(
        revoked=record.revoked,
        quiet=will_be_quiet,
        has_evidence=record.has_identity_evidence,
        signals_match=node.host_identity_readable,
    )
    reasons = sorted((_RELEASE_REASONS[r] for r in refusals), key=list(ReleaseReason).index)

    if not reasons:
        return _row(
            node,
            NodeClass.REBIND_POSSIBLE,
            f"none: re-binds to {record.agent_id} once it has been quiet for {wait}",
            agent_id=record.agent_id,
        )
    if ReleaseReason.REVOKED in reasons:
        action = (
            f"{record.agent_id} is revoked and release refuses it: resolve the record in the "
            "Console before moving this node"
        )
    elif ReleaseReason.NOT_QUIET in reasons:
        action = (
            f"stop the other process reporting as {record.agent_id}, then release it once it "
            f"has been quiet for {wait}"
        )
    else:
        action = f"release {record.agent_id} once it has been quiet for {wait}; the pod re-binds"
    blocking = {ReleaseReason.REVOKED, ReleaseReason.NOT_QUIET}
    return _row(
        node,
        NodeClass.NEEDS_RELEASE,
        action,
        agent_id=record.agent_id,
        reasons=tuple(reasons),
        releasable=not blocking.intersection(reasons),
    )


def plan_hostdatadir_migration(
    nodes: Iterable[MigrationNode], *, quiet_window_seconds: float = DEFAULT_QUIET_WINDOW_SECONDS
) -> MigrationPlan:
    """Classify every node; rows are sorted by node name.

    Raises :class:`~rollout_policy.errors.MigrationInputError` for a node listed twice or with
    more than one node-monitor record under its name.
    """
    if quiet_window_seconds < 0:
        raise ValueError(f"quiet_window_seconds must not be negative, got {quiet_window_seconds}")
    rows: dict[NodeName, MigrationRow] = {}
    for node in nodes:
        if node.name in rows:
            raise MigrationInputError(node.name, "listed more than once")
        rows[node.name] = _classify(node, quiet_window_seconds)
    return MigrationPlan(
        rows=tuple(rows[name] for name in sorted(rows)),
        quiet_window_seconds=quiet_window_seconds,
    )
