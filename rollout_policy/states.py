"""The rollout state machine.

```
             start              complete
  pending ─────────► running ───────────► succeeded
     │  │            │ ▲  │ ▲    fail
     │  │      pause │ │  │ └───────────► failed
     │  │            ▼ │  │ resume
     │  │         paused │ stall
     │  │            │   ▼
     │  │            └─► stalled        (paused --stall--> stalled as well)
     │  └─fail─► failed
     └────── abort (from pending, running, paused, stalled) ──► aborted
```

Only ``running`` dispatches commands. ``stalled`` is the threshold's doing and ``paused`` the
operator's; both wait for ``resume`` or ``abort``. ``succeeded``, ``failed`` and ``aborted`` are
terminal. ``complete`` means every wave was dispatched and finished: agents that failed
individually are in the counts, the rollout itself still succeeded. ``fail`` is for the rollout
as a whole going wrong (its artifact cannot be fetched, say).

There are no self-transitions: pausing a paused rollout raises, so an API can answer 409.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from contracts.vocabulary.rollouts import RolloutState
from rollout_policy.errors import IllegalTransitionError
from rollout_policy.events import EventKind

__all__ = [
    "EVENT_TARGETS",
    "HALTED_STATES",
    "LEGAL_EVENTS",
    "TERMINAL_STATES",
    "EventKind",
    "RolloutEvent",
    "RolloutState",
    "RolloutStatus",
    "Transition",
    "next_state",
]


TERMINAL_STATES: frozenset[RolloutState] = frozenset(
    {RolloutState.ABORTED, RolloutState.SUCCEEDED, RolloutState.FAILED}
)

HALTED_STATES: frozenset[RolloutState] = frozenset({RolloutState.STALLED, RolloutState.PAUSED})
"""Waiting for a decision: ``resume`` or ``abort``."""

EVENT_TARGETS: Mapping[EventKind, RolloutState] = MappingProxyType(
    {
        EventKind.START: RolloutState.RUNNING,
        EventKind.STALL: RolloutState.STALLED,
        EventKind.PAUSE: RolloutState.PAUSED,
        EventKind.RESUME: RolloutState.RUNNING,
        EventKind.ABORT: RolloutState.ABORTED,
        EventKind.COMPLETE: RolloutState.SUCCEEDED,
        EventKind.FAIL: RolloutState.FAILED,
    }
)
"""Where each event leads, when it is legal."""

LEGAL_EVENTS: Mapping[RolloutState, frozenset[EventKind]] = MappingProxyType(
    {
        RolloutState.PENDING: frozenset({EventKind.START, EventKind.ABORT, EventKind.FAIL}),
        RolloutState.RUNNING: frozenset(
            {
                EventKind.STALL,
                EventKind.PAUSE,
                EventKind.ABORT,
                EventKind.COMPLETE,
                EventKind.FAIL,
            }
        ),
        # Results of the wave in flight keep arriving while paused; a crossed threshold is
        # recorded as a stall so the operator sees why it must not simply be resumed.
        RolloutState.PAUSED: frozenset({EventKind.RESUME, EventKind.STALL, EventKind.ABORT}),
        RolloutState.STALLED: frozenset({EventKind.RESUME, EventKind.ABORT}),
        RolloutState.ABORTED: frozenset(),
        RolloutState.SUCCEEDED: frozenset(),
        RolloutState.FAILED: frozenset(),
    }
)

_REASON_REQUIRED = frozenset({EventKind.STALL, EventKind.FAIL})


@dataclass(frozen=True)
class RolloutEvent:
    """Something that happens to a rollout. ``stall`` and ``fail`` must say why."""

    kind: EventKind
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.kind in _REASON_REQUIRED and not self.reason:
            raise ValueError(f"a {self.kind.value} event needs a reason")

    @classmethod
    def start(cls) -> RolloutEvent:
        return cls(EventKind.START)

    @classmethod
    def stall(cls, reason: str) -> RolloutEvent:
        return cls(EventKind.STALL, reason)

    @classmethod
    def pause(cls, reason: str | None = None) -> RolloutEvent:
        return cls(EventKind.PAUSE, reason)

    @classmethod
    def resume(cls) -> RolloutEvent:
        return cls(EventKind.RESUME)

    @classmethod
    def abort(cls, reason: str | None = None) -> RolloutEvent:
        return cls(EventKind.ABORT, reason)

    @classmethod
    def complete(cls) -> RolloutEvent:
        return cls(EventKind.COMPLETE)

    @classmethod
    def fail(cls, reason: str) -> RolloutEvent:
        return cls(EventKind.FAIL, reason)


def next_state(state: RolloutState, event: EventKind) -> RolloutState:
    """The state ``event`` leads to from ``state``; raises :class:`IllegalTransitionError`."""
    target = EVENT_TARGETS[event]
    if event not in LEGAL_EVENTS[state]:
        raise IllegalTransitionError(from_state=state, to_state=target, event=event)
    return target


@dataclass(frozen=True)
class Transition:
    from_state: RolloutState
    to_state: RolloutState
    event: RolloutEvent


@dataclass(frozen=True)
class RolloutStatus:
    """A rollout's place in the machine. ``reason`` is the reason the last event carried: why
    it stalled, paused, aborted or failed (``start``, ``resume`` and ``complete`` carry none)."""

    state: RolloutState = RolloutState.PENDING
    reason: str | None = None
    history: tuple[Transition, ...] = ()

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def dispatch_allowed(self) -> bool:
        """Whether commands may be sent: only while running."""
        return self.state is RolloutState.RUNNING

    def allowed_events(self) -> frozenset[EventKind]:
        return LEGAL_EVENTS[self.state]

    def apply(self, event: RolloutEvent) -> RolloutStatus:
        """The status after ``event``; raises :class:`IllegalTransitionError`."""
        target = next_state(self.state, event.kind)
        return RolloutStatus(
            state=target,
            reason=event.reason,
            history=(*self.history, Transition(self.state, target, event)),
        )
