"""Wave planning: canary first, growth by percentages or factor, capped, deterministic per seed."""

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_policy import (
    AgentId,
    DuplicateAgentError,
    FactorGrowth,
    PercentGrowth,
    WaveKind,
    WavePolicy,
    WavePolicyError,
    plan_waves,
    wave_sizes,
)


def ids(count: int) -> list[AgentId]:
    return [AgentId(f"agent-{i:04}") for i in range(count)]


@pytest.mark.parametrize(
    ("count", "policy", "sizes"),
    [
        # docs/rollout-policy.md, "Waves", example 1
        (1000, WavePolicy(canary_size=5, max_wave_size=200), (5, 5, 90, 200, 200, 200, 200, 100)),
        # example 2: the 1 % step is already covered by the canary and is skipped
        (20, WavePolicy(canary_size=1), (1, 1, 8, 10)),
        # example 3: a growth factor of 2 from a canary of 2
        (100, WavePolicy(canary_size=2, growth=FactorGrowth(2)), (2, 4, 8, 16, 32, 38)),
        # example 4: a canary larger than the fleet is the whole fleet, in one wave
        (3, WavePolicy(canary_size=10), (3,)),
        # example 5: steps that stop short of 100 get a final 100 implied
        (10, WavePolicy(canary_size=1, growth=PercentGrowth((50,))), (1, 4, 5)),
        (10, WavePolicy(canary_size=1, growth=PercentGrowth(())), (1, 9)),
        (7, WavePolicy(canary_size=2, growth=FactorGrowth(1), max_wave_size=2), (2, 2, 2, 1)),
        (0, WavePolicy(), ()),
    ],
)
def test_worked_wave_sizes(count: int, policy: WavePolicy, sizes: tuple[int, ...]) -> None:
    assert wave_sizes(count, policy) == sizes


def test_no_eligible_agents_means_no_waves() -> None:
    plan = plan_waves([], WavePolicy(), seed=1)
    assert plan.waves == ()
    assert plan.agent_count == 0


def test_the_plan_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    policy = WavePolicy(canary_size=3)
    first = plan_waves(ids(50), policy, seed="rollout-7f3a")
    assert first == plan_waves(list(reversed(ids(50))), policy, seed="rollout-7f3a")
    assert (
        first.waves[0].agent_ids
        != plan_waves(ids(50), policy, seed="rollout-7f3b").waves[0].agent_ids
    )


def test_wave_of_finds_the_wave_holding_an_agent() -> None:
    plan = plan_waves(ids(10), WavePolicy(canary_size=2), seed=3)
    assert sum(len(wave.agent_ids) for wave in plan.waves) == 10
    for wave in plan.waves:
        for agent_id in wave.agent_ids:
            assert plan.wave_of(agent_id) == wave.index
    assert plan.wave_of(AgentId("nobody")) is None
    assert plan.assignments() == {
        agent_id: wave.index for wave in plan.waves for agent_id in wave.agent_ids
    }
    assert len(plan.assignments()) == 10


def test_an_agent_given_twice_is_refused() -> None:
    with pytest.raises(DuplicateAgentError):
        plan_waves([AgentId("a"), AgentId("b"), AgentId("a")], WavePolicy(), seed=0)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: WavePolicy(canary_size=0), "canary_size"),
        (lambda: WavePolicy(max_wave_size=0), "max_wave_size"),
        (lambda: WavePolicy(canary_size=10, max_wave_size=5), "canary_size"),
        (lambda: PercentGrowth((10, 5)), "growth.steps"),
        (lambda: PercentGrowth((0, 50)), "growth.steps"),
        (lambda: PercentGrowth((50, 150)), "growth.steps"),
        (lambda: FactorGrowth(0.5), "growth.factor"),
        (lambda: FactorGrowth(float("inf")), "growth.factor"),
    ],
)
def test_an_unworkable_policy_is_refused_naming_the_field(build: object, field: str) -> None:
    with pytest.raises(WavePolicyError) as caught:
        build()  # type: ignore[operator]
    assert caught.value.field == field


growths = st.one_of(
    st.lists(st.integers(1, 100), max_size=5, unique=True)
    .map(sorted)
    .map(lambda steps: PercentGrowth(tuple(steps))),
    st.lists(st.floats(0.1, 100), max_size=4, unique=True)
    .map(sorted)
    .map(lambda steps: PercentGrowth(tuple(steps))),
    st.floats(1, 10).map(FactorGrowth),
)


@st.composite
def policies(draw: st.DrawFn) -> WavePolicy:
    canary = draw(st.integers(1, 50))
    cap = draw(st.one_of(st.none(), st.integers(canary, 400)))
    return WavePolicy(canary_size=canary, growth=draw(growths), max_wave_size=cap)


@settings(deadline=None)
@given(st.integers(0, 3000), policies(), st.one_of(st.integers(), st.text(max_size=8)))
def test_every_eligible_agent_is_in_exactly_one_nonempty_capped_wave(
    count: int, policy: WavePolicy, seed: int | str
) -> None:
    eligible = ids(count)
    plan = plan_waves(eligible, policy, seed)
    placed = [agent_id for wave in plan.waves for agent_id in wave.agent_ids]
    assert sorted(placed) == eligible
    assert all(wave.size >= 1 for wave in plan.waves)
    if policy.max_wave_size is not None:
        assert all(wave.size <= policy.max_wave_size for wave in plan.waves)
    assert [wave.index for wave in plan.waves] == list(range(len(plan.waves)))
    if count:
        assert plan.waves[-1].cumulative_count == count
    assert plan == plan_waves(list(reversed(eligible)), policy, seed)


@settings(deadline=None)
@given(st.integers(1, 3000), policies(), st.integers())
def test_the_canary_comes_first_and_only_first(count: int, policy: WavePolicy, seed: int) -> None:
    plan = plan_waves(ids(count), policy, seed)
    assert plan.waves[0].kind is WaveKind.CANARY
    assert plan.waves[0].size == min(policy.canary_size, count)
    assert all(wave.kind is WaveKind.GROWTH for wave in plan.waves[1:])


@settings(deadline=None)
@given(st.integers(1, 3000), policies())
def test_a_wave_ends_exactly_on_each_percent_step_past_the_canary(
    count: int, policy: WavePolicy
) -> None:
    """The operator reads "50 %" as "after this wave, half the fleet has the update"."""
    if not isinstance(policy.growth, PercentGrowth):
        return
    sizes = wave_sizes(count, policy)
    cumulative = {sum(sizes[: i + 1]) for i in range(len(sizes))}
    for step in policy.growth.steps:
        target = math.ceil(count * Fraction(str(step)) / 100)
        assert target <= sizes[0] or target in cumulative
