"""Leader election on a coordination.k8s.io Lease: the elector against the API double in this
process (fast, exact timing), then real cluster-agent processes publishing to a real Console."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.cluster import STANDING_BY, LeaseElector, LeaseLock, LeaseTiming
from testkit.console import ConsoleProcess
from testkit.k8s import (
    LEASE_DURATION,
    RETRY_PERIOD,
    NatsObserver,
    cluster_agent,
    cluster_view,
    register_cluster,
    stop_all,
)
from testkit.kube import FleetSpec, KubeApiDouble, objects, preload_fleet
from testkit.waiting import await_for, wait_for

TIMING = LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)
NAMESPACE = "proxima-system"
LEASE = "proxima-agent-cluster-agent"


class Campaign:
    """Electors running as tasks in this loop, each with its own API client; a sampler checks
    continuously that no two lead at once."""

    def __init__(self, kube: KubeApiDouble) -> None:
        self.kube = kube
        self.electors: dict[str, LeaseElector] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.overlaps: list[tuple[float, list[str]]] = []
        self._clients: list[object] = []
        self._sampler: asyncio.Task[None] | None = None

    def start(self, identity: str) -> LeaseElector:
        api = self.kube.api_client()
        self._clients.append(api)
        elector = LeaseElector(
            LeaseLock(api, LEASE, NAMESPACE, timeout=1.0), identity, timing=TIMING
        )
        self.electors[identity] = elector
        self.tasks[identity] = asyncio.create_task(elector.run())
        if self._sampler is None:
            self._sampler = asyncio.create_task(self._sample())
        return elector

    async def _sample(self) -> None:
        while True:
            leading = self.leaders()
            if len(leading) > 1:
                self.overlaps.append((time.monotonic(), leading))
            await asyncio.sleep(0.01)

    def leaders(self) -> list[str]:
        return [name for name, e in self.electors.items() if e.is_leader]

    async def crash(self, identity: str) -> None:
        """The process dies: no release, no more renewals."""
        task = self.tasks.pop(identity)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop(self) -> None:
        for identity in list(self.tasks):
            await self.crash(identity)
        if self._sampler is not None:
            self._sampler.cancel()
        for api in self._clients:
            api.close()  # type: ignore[attr-defined]


@pytest.fixture
async def campaign(kube_api: KubeApiDouble) -> AsyncIterator[Campaign]:
    kube_api.put(objects.namespace(NAMESPACE))
    running = Campaign(kube_api)
    try:
        yield running
    finally:
        await running.stop()


async def test_one_of_three_leads_the_others_stand_by_and_say_so_once(
    campaign: Campaign, kube_api: KubeApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.cluster.election")
    for name in ("a", "b", "c"):
        campaign.start(name)
    leader = (await await_for(campaign.leaders, 5, "a leader"))[0]
    # Many retry periods of standing by, still one line per standby.
    await await_for(
        lambda: len(kube_api.requests(verb="get", resource="leases")) > 30, 10, "retries"
    )
    assert campaign.leaders() == [leader]
    assert campaign.overlaps == []
    assert caplog.text.count(STANDING_BY) == 2
    lease = kube_api.get("leases", LEASE, NAMESPACE)
    assert lease is not None and lease["spec"]["holderIdentity"] == leader
    assert lease["spec"]["leaseDurationSeconds"] == 2
    # get, create, update: never patch, which the chart's Role does not grant.
    assert {r.verb for r in kube_api.requests(resource="leases")} <= {"get", "create", "update"}


async def test_a_standby_takes_over_within_the_lease_duration_when_the_leader_dies(
    campaign: Campaign,
) -> None:
    for name in ("a", "b"):
        campaign.start(name)
    leader = (await await_for(campaign.leaders, 5, "a leader"))[0]
    other = "b" if leader == "a" else "a"
    await campaign.crash(leader)
    died = time.monotonic()
    await await_for(lambda: campaign.electors[other].is_leader, 5, "takeover")
    took = time.monotonic() - died
    # The standby saw the last renewal up to one (jittered) retry period late, and notices the
    # expiry up to one more late: lease - retry <= took <= lease + 2 x retry x 1.2.
    assert TIMING.lease_duration - 2 * TIMING.retry_period <= took
    assert took <= TIMING.lease_duration + 2 * TIMING.retry_period * 1.2 + 0.1
    # The dead leader's own view lapsed at its renew deadline, before the standby took over.
    assert campaign.overlaps == []
    assert campaign.electors[other].transitions == 1


async def test_a_leader_that_releases_hands_over_within_a_retry_period(
    campaign: Campaign, kube_api: KubeApiDouble
) -> None:
    for name in ("a", "b"):
        campaign.start(name)
    leader = (await await_for(campaign.leaders, 5, "a leader"))[0]
    other = "b" if leader == "a" else "a"
    await campaign.crash(leader)
    await campaign.electors[leader].release()
    released = time.monotonic()
    await await_for(lambda: campaign.electors[other].is_leader, 5, "takeover")
    assert time.monotonic() - released <= 2 * TIMING.retry_period + 0.2
    lease = kube_api.get("leases", LEASE, NAMESPACE)
    assert lease is not None and lease["spec"]["leaseTransitions"] == 1


async def test_a_leader_that_cannot_renew_stops_leading_before_its_lease_expires(
    campaign: Campaign, kube_api: KubeApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.cluster.election")
    elector = campaign.start("solo")
    await await_for(lambda: elector.is_leader, 5, "leading")
    kube_api.down()
    down = time.monotonic()
    await await_for(lambda: not elector.is_leader, 5, "leadership lapsed")
    assert time.monotonic() - down <= TIMING.renew_deadline + 0.1
    await await_for(lambda: "lost leadership" in caplog.text, 5, "the log line")
    kube_api.up()
    await await_for(lambda: elector.is_leader, 5, "leading again")
    assert caplog.text.count("cannot reach the API server") == 1
    assert caplog.text.count("readable again") == 1


async def test_a_forbidden_lease_is_reported_once_with_the_fix(
    campaign: Campaign, kube_api: KubeApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    kube_api.forbid("leases", group="coordination.k8s.io", verbs=["get", "create", "update"])
    elector = campaign.start("a")
    await await_for(lambda: len(kube_api.requests(resource="leases")) >= 5, 5, "five attempts")
    assert not elector.is_leader
    assert caplog.text.count("forbidden to use lease proxima-system/") == 1
    assert "leader-election Role must grant get, create and update on leases" in caplog.text


# -- real processes -------------------------------------------------------------------------------


def _preload(kube: KubeApiDouble) -> None:
    preload_fleet(kube, FleetSpec(pods=150, nodes=4, app_namespaces=4, rollouts=1))
    kube.put(objects.namespace(NAMESPACE))


def _console_leaders(console: ConsoleProcess, slug: str, ids: set[str]) -> list[str] | None:
    agents = [a for a in cluster_view(console, slug)["agents"] if a["id"] in ids]
    if len(agents) != len(ids) or any(a["leader"] is None for a in agents):
        return None
    return [a["id"] for a in agents if a["leader"]]


def test_three_collectors_elect_one_leader_and_a_standby_publishes_soon_after_it_is_killed(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kube_api: KubeApiDouble,
    kube_env: dict[str, str],
    tmp_path: Path,
) -> None:
    _preload(kube_api)
    slug, token = register_cluster(k8s_console, "HA Three")
    started = time.monotonic()
    agents = [
        cluster_agent(
            tmp_path,
            k8s_console,
            kube_env,
            token=token,
            cluster_name="HA Three",
            ordinal=i,
            replicas=3,
        ).start()
        for i in range(3)
    ]
    try:
        by_id = {agent.agent_id(): agent for agent in agents}
        ids = set(by_id)

        def publishers() -> list[str]:
            return [p for p in observer.publishers(since=started) if p in ids]

        wait_for(lambda: publishers(), timeout=30, what="a first inventory")
        leader_id = publishers()[0]
        standbys = [a for i, a in by_id.items() if i != leader_id]
        for standby in standbys:
            wait_for(lambda s=standby: STANDING_BY in s.log(), what=f"{standby.name} standing by")
        wait_for(lambda: len(observer.syncs(leader_id, since=started)) >= 6, what="six syncs")
        assert publishers() == [leader_id], "exactly one publisher"
        assert wait_for(lambda: _console_leaders(k8s_console, slug, ids), what="heartbeats") == [
            leader_id
        ]

        by_id[leader_id].kill()
        killed = time.monotonic()
        first = wait_for(
            lambda: [s for s in observer.syncs(since=killed) if s.agent_id in ids],
            timeout=15,
            what="a standby's first inventory",
        )[0]
        new_leader = first.agent_id
        print(f"standby published {first.at - killed:.2f} s after the leader was killed")
        # It stands by until the dead leader's lease runs out (its last renewal was at most a
        # retry period before the kill), then relists and publishes.
        assert first.at - killed <= LEASE_DURATION + 2 * RETRY_PERIOD + 1.5
        wait_for(lambda: len(observer.syncs(new_leader, since=killed)) >= 4, what="four syncs")
        assert publishers() == [leader_id, new_leader], "one publisher at any time"
        assert wait_for(
            lambda: (
                (ls := _console_leaders(k8s_console, slug, ids - {leader_id})) == [new_leader]
                and ls
            ),
            what="the new leader in the Console",
        )
        third = next(a for i, a in by_id.items() if i not in (leader_id, new_leader))
        # Standing by through the change of leader is one state: one line.
        assert third.log().count(STANDING_BY) == 1
        assert by_id[new_leader].log().count("became the leader") == 1
        assert third.readyz()[0] == 200
    finally:
        stop_all(agents)


def test_two_collectors_hand_over_at_once_when_the_leader_stops_cleanly(
    k8s_console: ConsoleProcess,
    observer: NatsObserver,
    kube_api: KubeApiDouble,
    kube_env: dict[str, str],
    tmp_path: Path,
) -> None:
    _preload(kube_api)
    _slug, token = register_cluster(k8s_console, "HA Two")
    started = time.monotonic()
    agents = [
        cluster_agent(
            tmp_path,
            k8s_console,
            kube_env,
            token=token,
            cluster_name="HA Two",
            ordinal=i,
            replicas=2,
        ).start()
        for i in range(2)
    ]
    try:
        by_id = {agent.agent_id(): agent for agent in agents}
        wait_for(
            lambda: [s for s in observer.syncs(since=started) if s.agent_id in by_id],
            timeout=30,
            what="a first inventory",
        )
        leader_id = next(s.agent_id for s in observer.syncs(since=started) if s.agent_id in by_id)
        other_id = next(i for i in by_id if i != leader_id)
        wait_for(lambda: STANDING_BY in by_id[other_id].log(), what="standing by")
        by_id[leader_id].stop(signal.SIGTERM)
        stopped = time.monotonic()
        assert "released lease proxima-system/proxima-agent-cluster-agent" in by_id[leader_id].log()
        first = wait_for(
            lambda: observer.syncs(other_id, since=stopped - 0.5), timeout=10, what="handover"
        )[0]
        print(f"standby published {first.at - stopped:.2f} s after the leader stopped")
        # Released, not expired: one retry period (with jitter) and a relist.
        assert first.at - stopped <= 2 * RETRY_PERIOD + 1.0
        assert [p for p in observer.publishers(since=started) if p in by_id] == [
            leader_id,
            other_id,
        ]
    finally:
        stop_all(agents)
