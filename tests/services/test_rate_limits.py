"""Rate-limit counters in the database (``console.services.rate_limits``), on SQLite and
(postgres lane) PostgreSQL: two Console replicas count against one number, a restart keeps it,
the window slides, a refused hit is not counted, and spent counters are swept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlmodel import select

from console.core.db import make_engine, migrate
from console.core.settings import ConsoleSettings
from console.errors import TooManyRequestsError
from console.models import RateCounter
from console.services.rate_limits import RateLimits
from console.services.unit_of_work import UnitsOfWork


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # the start of a minute window

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def units(database_url: str) -> Iterator[UnitsOfWork]:
    migrate(database_url)
    engine = make_engine(database_url)
    yield UnitsOfWork(engine, serialize_writes=database_url.startswith("sqlite"))
    engine.dispose()


def replica(units: UnitsOfWork, clock: Clock, **rates: str) -> RateLimits:
    """One Console replica's limits over the shared database (a new one = a restart)."""
    settings = ConsoleSettings.model_validate({"enroll_rate_per_source": "1000/minute", **rates})
    return RateLimits(settings, units, clock=clock)


async def enroll(limits: RateLimits, token: str = "pxi_abc", source: str = "10.0.0.1") -> None:
    await limits.check(limits.enroll, source=source, token=token)


async def test_replicas_share_one_rate_and_a_restart_keeps_it(units: UnitsOfWork):
    clock = Clock()
    a, b = (replica(units, clock, enroll_rate_per_token="3/minute") for _ in range(2))
    await enroll(a)
    await enroll(b)
    await enroll(a)
    with pytest.raises(TooManyRequestsError) as refused:
        await enroll(b)
    assert refused.value.retry_after >= 1
    restarted = replica(units, clock, enroll_rate_per_token="3/minute")
    with pytest.raises(TooManyRequestsError):
        await enroll(restarted)
    await enroll(restarted, token="pxi_other")  # another token is not held back


async def test_the_window_slides_and_refusals_are_not_counted(units: UnitsOfWork):
    clock = Clock()
    limits = replica(units, clock, enroll_rate_per_token="4/minute")
    for _ in range(4):
        await enroll(limits)
    for _ in range(10):  # a flood of refused attempts does not lengthen the wait
        with pytest.raises(TooManyRequestsError):
            await enroll(limits)
    clock.now += 60 + 30  # half-way into the next window: the last one weighs 4 * 0.5 = 2
    await enroll(limits)
    await enroll(limits)
    with pytest.raises(TooManyRequestsError) as refused:
        await enroll(limits)
    assert 1 <= refused.value.retry_after <= 30
    clock.now += 60 + 1  # a whole window later: the old hits no longer count
    await enroll(limits)


async def test_a_source_past_its_limit_leaves_the_token_counter_alone(units: UnitsOfWork):
    clock = Clock()
    limits = replica(
        units, clock, enroll_rate_per_source="2/minute", enroll_rate_per_token="3/minute"
    )
    await enroll(limits, source="10.9.9.9")
    await enroll(limits, source="10.9.9.9")
    for _ in range(5):
        with pytest.raises(TooManyRequestsError) as refused:
            await enroll(limits, source="10.9.9.9")
        assert "address" in refused.value.message
    await enroll(limits, source="10.1.1.1")  # the token's 3rd hit: still within its rate


async def test_agent_calls_are_limited_per_agent_id_and_spent_counters_swept(
    units: UnitsOfWork,
):
    clock = Clock()
    limits = replica(units, clock, agent_credentials_rate="2/minute")
    rule = limits.agent_credentials
    for _ in range(2):
        await limits.check(rule, source=None, token="agent-1")
    with pytest.raises(TooManyRequestsError) as refused:
        await limits.check(rule, source=None, token="agent-1")
    assert "agent" in refused.value.message
    await limits.check(rule, source=None, token="agent-2")
    await limits.check(rule, source=None, token="x" * 5000)  # a digest keys it
    rows = await units.run(lambda uow: uow.session.exec(select(RateCounter)).all())
    assert len(rows) == 3 and all(len(r.key) <= 128 for r in rows)
    assert await limits.sweep() == 0
    clock.now += 2 * 60 + 1
    assert await limits.sweep() == 3


async def test_guesses_sharing_a_tokens_prefix_never_spend_that_tokens_rate(units: UnitsOfWork):
    """The per-token counter was keyed by the public 10-character prefix: 32 made-up tokens
    with the admin token's prefix made the real token answer 429."""
    clock = Clock()
    limits = replica(units, clock, sign_in_rate_per_token="3/minute")
    real = "pxa_" + "r" * 40
    for n in range(10):
        await limits.check(limits.sign_in, source=f"10.0.0.{n}", token=real[:10] + f"{n:040d}")
    await limits.check(limits.sign_in, source="10.1.1.1", token=real, valid=True)
    rows = await units.run(lambda uow: uow.session.exec(select(RateCounter)).all())
    assert not any(real[:10] in r.key for r in rows), "no counter is keyed by the prefix"


async def test_a_valid_token_is_never_refused_for_its_sources_failures(units: UnitsOfWork):
    """An address past its limit of failed attempts (others' guesses behind one NAT) made the
    valid token presented from it answer 429."""
    clock = Clock()
    limits = replica(units, clock, sign_in_rate_per_source="2/minute")
    for n in range(2):
        await limits.check(limits.sign_in, source="10.0.0.1", token=f"pxa_guess{n}")
    with pytest.raises(TooManyRequestsError):
        await limits.check(limits.sign_in, source="10.0.0.1", token="pxa_guess9")
    for _ in range(5):
        await limits.check(limits.sign_in, source="10.0.0.1", token="pxa_real", valid=True)
