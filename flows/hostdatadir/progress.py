"""Where each node stands while the DaemonSet's pods move to the new directory: one verdict per
node from its ``k8s-node-monitor`` record now and before the move, and the wait loop's state
(:class:`NodeProgress`). The flow's ``wait-for-nodes`` task reads the records, releases and
sleeps; everything it decides is here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from contracts.views import AgentView
from contracts.vocabulary import AgentFlag, AgentStatus, AgentType, ErrorReason
from flows.reasons import parse_reason
from rollout_policy import REBIND_REFUSALS, AgentId, MigrationRow, NodeClass, is_quiet

__all__ = [
    "RELEASE_CURES",
    "NodeProgress",
    "NodeState",
    "Verdict",
    "judge",
    "release_refused",
]


class NodeState(StrEnum):
    WAITING = "waiting"
    CONFLICT = "conflict"
    WAITING_QUIET = "waiting_quiet"
    RELEASED = "released"
    DONE = "done"
    FAILED = "failed"
    TIMED_OUT = "timed_out"

    @property
    def final(self) -> bool:
        return self in (NodeState.DONE, NodeState.FAILED, NodeState.TIMED_OUT)


@dataclass(frozen=True)
class Verdict:
    state: NodeState
    detail: str
    release: AgentId | None = None
    """Release this record now."""
    record: str | None = None


RELEASE_CURES: Final = frozenset(REBIND_REFUSALS) - {
    ErrorReason.AGENT_REVOKED,
    ErrorReason.NAME_IN_USE,
}
"""The re-bind refusals only a release cures (the Console re-binds a released record): never
``agent_revoked`` (revoked is never re-bound), and ``name_in_use`` cures itself once the
record is quiet."""


def _new_conflict(before: AgentView | None, record: AgentView) -> ErrorReason | str | None:
    """The reason of an enrollment clash on ``record`` since ``before`` (None: no new one)."""
    conflict = record.conflict
    count_before = before.conflict.count if before and before.conflict else 0
    if AgentFlag.ENROLLMENT_CONFLICT not in record.flags or conflict is None:
        return None
    if conflict.count <= count_before:
        return None
    return parse_reason(conflict.reason) if conflict.reason else "unknown"


def judge(
    row: MigrationRow,
    before: AgentView | None,
    record: AgentView | None,
    *,
    window: float,
    released: bool,
    require_new_instance: bool = True,
) -> Verdict:
    """Where one node stands, from its ``k8s-node-monitor`` record now and before the move.

    Done when the record holding the node's name is online with a new instance (the pod on the
    new directory) and, where the node had a record, it is that record. A node that needs
    release — by plan, or because its re-bind was refused for a reason only a release cures
    (:data:`RELEASE_CURES`) — is released once the record is quiet past ``window`` (the
    Console's quiet window; the Console decides the release itself)."""
    if record is None:
        return Verdict(NodeState.WAITING, f"no {AgentType.K8S_NODE_MONITOR} record yet")
    rid = record.id
    if row.agent_id and rid != row.agent_id:
        return Verdict(
            NodeState.FAILED, f"the name is held by {rid}, not by {row.agent_id}", record=rid
        )
    status = record.status
    instance = record.instance_id
    fresh = not require_new_instance or instance != (before.instance_id if before else None)
    if status is AgentStatus.ONLINE and instance and fresh:
        if row.agent_id is None:
            how = f"enrolled as {rid}"
        elif released:
            how = f"released and re-bound to {rid}"
        else:
            how = f"re-bound to {rid}"
        return Verdict(NodeState.DONE, how, record=rid)
    if status is AgentStatus.REVOKED:
        return Verdict(NodeState.FAILED, f"{rid} was revoked during the move", record=rid)
    reason = _new_conflict(before, record)
    must_release = row.node_class is NodeClass.NEEDS_RELEASE or (
        row.node_class is NodeClass.REBIND_POSSIBLE and reason in RELEASE_CURES
    )
    if status is AgentStatus.RELEASED or released:
        return Verdict(
            NodeState.RELEASED, f"{rid} released; waiting for the pod to re-bind", record=rid
        )
    if must_release:
        if is_quiet(record.seconds_since_seen, window):
            return Verdict(
                NodeState.WAITING_QUIET,
                f"{rid} quiet past the {window:g} s window: releasing",
                release=AgentId(rid),
                record=rid,
            )
        why = f"409 {reason}: " if reason else ""
        return Verdict(
            NodeState.WAITING_QUIET,
            f"{why}waiting until {rid} has been quiet for {window:g} s",
            record=rid,
        )
    if reason:
        then = "re-binds once it is quiet" if reason == ErrorReason.NAME_IN_USE else "waiting"
        return Verdict(NodeState.CONFLICT, f"409 {reason}: {then}", record=rid)
    return Verdict(
        NodeState.WAITING, f"waiting for the pod on the new directory ({rid} {status})", record=rid
    )


def release_refused(verdict: Verdict, reason: ErrorReason | str, message: str) -> Verdict:
    """The Console refused to release ``verdict.release``: a record seen within the window is
    tried again on the next poll; any other refusal fails the node."""
    retry = reason == ErrorReason.AGENT_RECENTLY_SEEN
    state = NodeState.WAITING_QUIET if retry else NodeState.FAILED
    return Verdict(state, f"release: {reason}: {message}", record=verdict.record)


@dataclass
class NodeProgress:
    """The wait loop's state: each node's latest verdict, the nodes whose record was released,
    and when a node last finished (the timeout counts from there: the DaemonSet rolls node by
    node, so a deadline for the whole cluster would depend on its size). Times are monotonic
    seconds given by the caller."""

    rows: Mapping[str, MigrationRow]
    """The plan's rows by node name, in the plan's order."""
    before: Mapping[str, AgentView]
    """The node-monitor records by node name before the move."""
    window: float
    require_new_instance: bool
    started: float
    states: dict[str, Verdict] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    last_progress: float = field(init=False)

    def __post_init__(self) -> None:
        self.last_progress = self.started

    def pending(self) -> list[str]:
        """The nodes not yet done, failed or timed out, in the plan's order."""
        return [n for n in self.rows if n not in self.states or not self.states[n].state.final]

    def judge(self, node: str, record: AgentView | None) -> Verdict:
        return judge(
            self.rows[node],
            self.before.get(node),
            record,
            window=self.window,
            released=node in self.released,
            require_new_instance=self.require_new_instance,
        )

    def mark_released(self, node: str, verdict: Verdict) -> Verdict:
        """The Console released ``verdict.release``: the node now waits for its pod."""
        self.released.add(node)
        return Verdict(
            NodeState.RELEASED,
            f"released {verdict.release}; waiting for the pod to re-bind",
            record=verdict.record,
        )

    def observe(self, node: str, verdict: Verdict, now: float) -> bool:
        """Record ``verdict``; whether the node is new or changed state (not just its detail)."""
        previous = self.states.get(node)
        self.states[node] = verdict
        if verdict.state.final:
            self.last_progress = now
        return previous is None or previous.state != verdict.state

    @property
    def finished(self) -> int:
        return sum(1 for v in self.states.values() if v.state.final)

    @property
    def complete(self) -> bool:
        return self.finished == len(self.rows)

    def percent(self) -> float:
        return 100.0 * self.finished / max(len(self.rows), 1)

    def stalled(self, now: float, timeout_seconds: float) -> bool:
        """No node finished for ``timeout_seconds``."""
        return now - self.last_progress > timeout_seconds

    def time_out(self, timeout_seconds: float) -> None:
        """Give up on every node still waiting."""
        for node, v in self.states.items():
            if not v.state.final:
                self.states[node] = Verdict(
                    NodeState.TIMED_OUT,
                    f"no node finished for {timeout_seconds:g} s; last: {v.detail}",
                    record=v.record,
                )

    def text(self) -> str:
        """One line for the progress artifact (at most 2000 characters)."""
        done = sum(1 for v in self.states.values() if v.state is NodeState.DONE)
        items = sorted(self.states.items())
        waiting = [f"{n} ({v.detail})" for n, v in items if not v.state.final]
        failed = [f"{n} ({v.detail})" for n, v in items if v.state is NodeState.FAILED]
        text = f"{done}/{len(self.rows)} nodes back"
        if failed:
            text += "; failed: " + "; ".join(failed)
        if waiting:
            text += "; waiting: " + "; ".join(waiting)
        return text[:2000]

    def outcomes(self) -> list[dict[str, str]]:
        """One row per node, sorted by name: ``node``, ``class``, ``outcome``, ``record``,
        ``detail``."""
        return [
            {
                "node": node,
                "class": self.rows[node].node_class.value,
                "outcome": self.states[node].state.value,
                "record": self.states[node].record or "-",
                "detail": self.states[node].detail,
            }
            for node in sorted(self.rows)
        ]
