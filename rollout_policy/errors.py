"""Errors raised by the policy. Each carries the data it is about.

```
RolloutPolicyError
├── VersionError                      text
│   └── VersionRangeError             text, clause
├── DuplicateAgentError               agent_id
├── InvalidPolicyError                field, value, reason
│   ├── WavePolicyError
│   └── ThresholdPolicyError
├── IllegalTransitionError            from_state, to_state, event
└── MigrationInputError               node, reason
```

Everything except ``IllegalTransitionError`` is also a ``ValueError``: it is bad input, which an
API answers with 422. An illegal transition is a conflict with the rollout's current state (409).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contracts.vocabulary.rollouts import RolloutState
    from rollout_policy.events import EventKind


class RolloutPolicyError(Exception):
    """Base of every error this package raises."""


class VersionError(RolloutPolicyError, ValueError):
    """``text`` is not a version like ``0.8.1``, ``v1.2`` or ``0.9.0-rc.1+build.7``."""

    def __init__(self, text: str, message: str | None = None) -> None:
        super().__init__(
            message or f"invalid version {text!r}: use MAJOR[.MINOR[.PATCH]][-PRERELEASE][+BUILD]"
        )
        self.text = text


class VersionRangeError(VersionError):
    """A version range whose ``clause`` does not parse, e.g. ``=>0.7`` in ``=>0.7,<0.9``."""

    def __init__(self, text: str, clause: str) -> None:
        super().__init__(
            text,
            f"invalid version range {text!r}: clause {clause!r} is not an operator "
            "(==, !=, >=, <=, >, <) followed by a version",
        )
        self.clause = clause


class DuplicateAgentError(RolloutPolicyError, ValueError):
    """The same ``agent_id`` was given twice where each agent must appear once."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id!r} appears more than once")
        self.agent_id = agent_id


class InvalidPolicyError(RolloutPolicyError, ValueError):
    """A policy ``field`` set to a ``value`` that cannot work, and why."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        super().__init__(f"{field}={value!r}: {reason}")
        self.field = field
        self.value = value
        self.reason = reason


class WavePolicyError(InvalidPolicyError):
    """A wave policy that cannot produce a plan (for example a zero canary)."""


class ThresholdPolicyError(InvalidPolicyError):
    """A failure criterion that could never trip or always trips."""


class IllegalTransitionError(RolloutPolicyError):
    """``event`` would move a rollout from ``from_state`` to ``to_state``, which is not allowed."""

    def __init__(self, from_state: RolloutState, to_state: RolloutState, event: EventKind) -> None:
        super().__init__(
            f"rollout cannot {event.value} while {from_state.value} "
            f"({from_state.value} -> {to_state.value} is not a legal transition)"
        )
        self.from_state = from_state
        self.to_state = to_state
        self.event = event


class MigrationInputError(RolloutPolicyError, ValueError):
    """Inventory for ``node`` that contradicts itself (say, two node-monitor records)."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"node {node!r}: {reason}")
        self.node = node
        self.reason = reason
