"""The fleet list filtered, counted and cut in SQL (what broke: it loaded every agent of the
environment and paged in Python). Each SQL condition must select exactly the records whose
computed view (``presenters.agent_public``, the one rule) shows that status or flag."""

from datetime import timedelta

import pytest

from console.models import Agent, AgentEvidence, NatsRevocation
from console.services import fleet
from contracts.views import AgentFilter
from contracts.vocabulary import AgentFlag, AgentStatus
from testkit.services import InProcessConsole


async def mixed_fleet(services: InProcessConsole) -> None:
    """Records on every side of every boundary: seen at the stale boundary and just past it,
    never seen, released, revoked, each flag set and not."""
    stale = services.settings.agent_stale_seconds
    now = services.clock.now
    ids = await services.add_agents(12, prefix="mix")
    ordered = [ids[n] for n in sorted(ids)]

    def work(uow) -> None:
        s = uow.session
        agents = [s.get(Agent, i) for i in ordered]
        agents[0].last_seen_at = now - timedelta(seconds=stale)  # the boundary: online
        agents[1].last_seen_at = now - timedelta(seconds=stale + 0.001)  # offline
        agents[2].last_seen_at = None  # never seen: offline
        agents[3].nats_public_key = None  # released
        agents[4].revoked_at = now  # revoked
        agents[5].shared_identity_since = now
        agents[6].version_flapping_since = now
        agents[7].last_conflict_at = now
        agents[8].can_self_update = False
        agents[9].rebound_at = now - timedelta(days=6)
        agents[10].rebound_at = now - timedelta(days=8)  # no longer flagged
        agents[11].labels = {"cluster": "eu-1", "odd key": "x"}
        for a in agents[:6]:
            s.add(AgentEvidence(agent_id=a.id, kind="machine-id", value_hash=a.id, source="t"))
        s.add(
            NatsRevocation(
                public_key="U" + "A" * 55,
                agent_id=agents[0].id,
                revoked_at=0,
                reason="rotated",
                refused_attempts=3,
                last_refused_at=now - timedelta(seconds=stale),
            )
        )
        s.add(
            NatsRevocation(
                public_key="U" + "B" * 55,
                agent_id=agents[1].id,
                revoked_at=0,
                reason="rotated",
                refused_attempts=1,
                last_refused_at=now - timedelta(seconds=stale + 1),
            )
        )
        for a in agents:
            s.add(a)

    await services.run(work, write=True)


async def everything(services: InProcessConsole):
    return (await fleet.list_agents(services.rt, services.principal, AgentFilter(limit=1000))).items


@pytest.mark.parametrize("status", list(AgentStatus))
async def test_the_status_filter_selects_what_the_views_show(services, status):
    await mixed_fleet(services)
    expected = {v.name for v in await everything(services) if v.status == status}
    page = await fleet.list_agents(
        services.rt, services.principal, AgentFilter(status=status, limit=1000)
    )
    assert {v.name for v in page.items} == expected
    assert page.total == len(expected) and expected


@pytest.mark.parametrize("flag", list(AgentFlag))
async def test_the_flag_filter_selects_what_the_views_show(services, flag):
    await mixed_fleet(services)
    expected = {v.name for v in await everything(services) if flag in v.flags}
    page = await fleet.list_agents(
        services.rt, services.principal, AgentFilter(flag=flag, limit=1000)
    )
    assert {v.name for v in page.items} == expected
    assert page.total == len(expected) and expected


async def test_labels_names_and_pages_are_filtered_in_the_query_in_a_stable_order(services):
    await mixed_fleet(services)
    p = services.principal
    labelled = await fleet.list_agents(services.rt, p, AgentFilter(label="odd key=x"))
    assert [v.name for v in labelled.items] == ["mix-011"]
    assert (await fleet.list_agents(services.rt, p, AgentFilter(label="cluster=eu-2"))).total == 0
    assert (
        await fleet.list_agents(services.rt, p, AgentFilter(name="%"))
    ).total == 0  # LIKE is escaped
    pages = [
        (await fleet.list_agents(services.rt, p, AgentFilter(limit=5, offset=o))).items
        for o in (0, 5, 10)
    ]
    names = [v.name for page in pages for v in page]
    assert names == sorted(names) and len(set(names)) == 12


async def test_the_total_is_capped_rather_than_counting_a_whole_large_fleet(services, monkeypatch):
    monkeypatch.setattr(fleet, "TOTAL_COUNT_CAP", 5)
    await services.add_agents(8, prefix="many")
    page = await fleet.list_agents(services.rt, services.principal, AgentFilter(limit=3))
    assert (page.total, page.total_capped, len(page.items)) == (5, True, 3)
    exact = await fleet.list_agents(
        services.rt, services.principal, AgentFilter(name="many-00", limit=3)
    )
    assert (exact.total, exact.total_capped) == (5, True)
    few = await fleet.list_agents(services.rt, services.principal, AgentFilter(name="many-000"))
    assert (few.total, few.total_capped) == (1, False)


@pytest.mark.parametrize("status", list(AgentStatus))
async def test_a_status_page_is_the_same_found_by_its_ranges_or_by_the_ordering_walk(
    services, monkeypatch, status
):
    """Few matches are found by the status's index ranges (offline: "seen before the cutoff"
    and "never seen", counted and fetched as two), many by walking the ordering index with
    the ranges' OR: both give the same records in the same order."""
    await mixed_fleet(services)
    by_ranges = await fleet.list_agents(services.rt, services.principal, AgentFilter(status=status))
    monkeypatch.setattr(fleet, "TOTAL_COUNT_CAP", 1)
    by_walk = await fleet.list_agents(services.rt, services.principal, AgentFilter(status=status))
    assert [v.name for v in by_walk.items] == [v.name for v in by_ranges.items]
    assert by_ranges.total == len(by_ranges.items) and not by_ranges.total_capped
