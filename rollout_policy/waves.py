"""Wave planning: a canary wave, then growing waves, every eligible agent in exactly one.

Sizes depend only on the number of eligible agents and the policy (:func:`wave_sizes`). Which
agent lands in which wave is a shuffle of the sorted eligible ids with ``random.Random(seed)``:
the same eligible set, policy and seed always give the same plan, so a rollout restarted from its
stored seed (its id, say) re-plans identically. Persist the plan anyway: the eligible set moves as
agents come and go.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from contracts.vocabulary.rollouts import DEFAULT_CANARY_SIZE, DEFAULT_WAVE_PERCENTAGES
from rollout_policy.errors import DuplicateAgentError, WavePolicyError
from rollout_policy.ids import AgentId


def _exact(number: float) -> Fraction:
    # Through str so that 0.1 means one tenth, not the binary float nearest to it.
    return Fraction(str(number))


@dataclass(frozen=True)
class PercentGrowth:
    """After the canary, waves fill the eligible set up to each cumulative percentage in turn.

    ``(1, 10, 50, 100)`` means: by the end of the first growth wave at least 1 % of the eligible
    agents have been sent the update (the canary counts), then 10 %, 50 %, everyone. Targets round
    up. A step the canary already covers is skipped rather than producing an empty wave. If the
    last step is below 100, a final step of 100 is implied.
    """

    steps: tuple[float, ...] = DEFAULT_WAVE_PERCENTAGES

    def __post_init__(self) -> None:
        previous = 0.0
        for step in self.steps:
            if not (math.isfinite(step) and 0 < step <= 100):
                raise WavePolicyError("growth.steps", self.steps, "each step must be in (0, 100]")
            if step <= previous:
                raise WavePolicyError(
                    "growth.steps", self.steps, "steps are cumulative: each must exceed the last"
                )
            previous = step


@dataclass(frozen=True)
class FactorGrowth:
    """After the canary, each wave is ``factor`` times the previous one, rounded up."""

    factor: float = 2.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise WavePolicyError(
                "growth.factor", self.factor, "must be at least 1 (waves never shrink)"
            )


@dataclass(frozen=True)
class WavePolicy:
    """``max_wave_size`` caps every wave, the canary included; ``None`` means no cap."""

    canary_size: int = DEFAULT_CANARY_SIZE
    growth: PercentGrowth | FactorGrowth = field(default_factory=PercentGrowth)
    max_wave_size: int | None = None

    def __post_init__(self) -> None:
        if self.canary_size < 1:
            raise WavePolicyError("canary_size", self.canary_size, "must be at least 1")
        if self.max_wave_size is not None:
            if self.max_wave_size < 1:
                raise WavePolicyError("max_wave_size", self.max_wave_size, "must be at least 1")
            if self.canary_size > self.max_wave_size:
                raise WavePolicyError(
                    "canary_size",
                    self.canary_size,
                    f"exceeds max_wave_size={self.max_wave_size}",
                )


class WaveKind(StrEnum):
    CANARY = "canary"
    GROWTH = "growth"


@dataclass(frozen=True)
class Wave:
    """``index`` 0 is the canary. ``agent_ids`` are sorted for display; ``cumulative_count`` is
    how many agents have been sent the update once this wave is dispatched."""

    index: int
    kind: WaveKind
    agent_ids: tuple[AgentId, ...]
    cumulative_count: int

    @property
    def size(self) -> int:
        return len(self.agent_ids)


@dataclass(frozen=True)
class WavePlan:
    waves: tuple[Wave, ...]
    seed: int | str

    @property
    def agent_count(self) -> int:
        return sum(wave.size for wave in self.waves)

    def assignments(self) -> dict[AgentId, int]:
        """Each planned agent's wave index, for storing per-agent targets in one pass."""
        return {agent_id: wave.index for wave in self.waves for agent_id in wave.agent_ids}

    def wave_of(self, agent_id: AgentId) -> int | None:
        """The index of the wave that holds ``agent_id``, or ``None`` if it is not planned."""
        for wave in self.waves:
            if agent_id in wave.agent_ids:
                return wave.index
        return None


def _percent_sizes(total: int, assigned: int, cap: int, growth: PercentGrowth) -> list[int]:
    sizes: list[int] = []
    steps = [_exact(step) for step in growth.steps]
    if not steps or steps[-1] < 100:
        steps.append(Fraction(100))
    for step in steps:
        target = math.ceil(total * step / 100)
        while assigned < target:
            size = min(cap, target - assigned)
            sizes.append(size)
            assigned += size
    return sizes


def _factor_sizes(
    total: int, assigned: int, cap: int, previous: int, growth: FactorGrowth
) -> list[int]:
    sizes: list[int] = []
    factor = _exact(growth.factor)
    while assigned < total:
        size = min(cap, total - assigned, math.ceil(previous * factor))
        sizes.append(size)
        assigned += size
        previous = size
    return sizes


def wave_sizes(eligible_count: int, policy: WavePolicy) -> tuple[int, ...]:
    """The size of each wave for ``eligible_count`` agents; empty when there are none.

    Every size is at least 1 and at most ``policy.max_wave_size``; they sum to the count.
    """
    if eligible_count < 0:
        raise ValueError(f"eligible_count must not be negative, got {eligible_count}")
    if eligible_count == 0:
        return ()
    cap = policy.max_wave_size or eligible_count
    canary = min(policy.canary_size, eligible_count)
    if isinstance(policy.growth, PercentGrowth):
        rest = _percent_sizes(eligible_count, canary, cap, policy.growth)
    else:
        rest = _factor_sizes(eligible_count, canary, cap, canary, policy.growth)
    return (canary, *rest)


def plan_waves(eligible: Iterable[AgentId], policy: WavePolicy, seed: int | str) -> WavePlan:
    """Place every eligible agent in exactly one wave; the canary is wave 0.

    Raises :class:`~rollout_policy.errors.DuplicateAgentError` if an id is given twice.
    """
    ordered = sorted(eligible)
    for previous, current in itertools.pairwise(ordered):
        if previous == current:
            raise DuplicateAgentError(current)
    random.Random(seed).shuffle(ordered)  # noqa: S311 - spreading load, not secrecy
    waves: list[Wave] = []
    start = 0
    for index, size in enumerate(wave_sizes(len(ordered), policy)):
        members = tuple(sorted(ordered[start : start + size]))
        start += size
        waves.append(
            Wave(
                index=index,
                kind=WaveKind.CANARY if index == 0 else WaveKind.GROWTH,
                agent_ids=members,
                cumulative_count=start,
            )
        )
    return WavePlan(waves=tuple(waves), seed=seed)
