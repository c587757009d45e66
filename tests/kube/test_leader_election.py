"""Three real processes run `kubernetes.leaderelection` with a LeaseLock against the double."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.kube import KubeApiDouble
from testkit.kube.candidate import Candidate
from testkit.waiting import wait_for

LEASE_SECONDS = 2
RETRY_SECONDS = 0.2


@pytest.fixture
def candidates(kube_api: KubeApiDouble, kube_kubeconfig: Path) -> Iterator[list[Candidate]]:
    env = kube_api.subprocess_env(kube_kubeconfig)
    started = [
        Candidate(
            f"collector-{n}", env, lease_duration=LEASE_SECONDS, retry_period=RETRY_SECONDS
        ).start()
        for n in range(3)
    ]
    try:
        yield started
    finally:
        for candidate in started:
            candidate.stop()


def _leaders(candidates: list[Candidate]) -> list[str]:
    return [c.identity for c in candidates if c.leading]


def _renewals(kube: KubeApiDouble, holder: str) -> int:
    return sum(
        1
        for r in kube.requests(verb="update", resource="leases")
        if r.status == 200 and (r.body or {}).get("spec", {}).get("holderIdentity") == holder
    )


def test_exactly_one_leads_and_a_standby_takes_over_when_it_dies(
    kube_api: KubeApiDouble, candidates: list[Candidate]
) -> None:
    leaders = wait_for(lambda: _leaders(candidates), timeout=30, what="a leader")
    assert len(leaders) == 1
    leader = next(c for c in candidates if c.identity == leaders[0])

    # Hold the election through renewals (one per ~RETRY_SECONDS) for 1.5 lease durations.
    start = _renewals(kube_api, leader.identity)
    wait_for(
        lambda: _renewals(kube_api, leader.identity) >= start + 1.5 * LEASE_SECONDS / RETRY_SECONDS,
        timeout=30,
        what="renewals",
    )
    assert _leaders(candidates) == [leader.identity]
    lease = kube_api.get("leases.coordination.k8s.io", "proxima-cluster-agent", "default")
    assert lease["spec"]["holderIdentity"] == leader.identity
    assert all(c.alive for c in candidates)  # the standbys stand by
    writers = {
        (r.body or {}).get("spec", {}).get("holderIdentity")
        for r in kube_api.requests(resource="leases")
        if r.verb in ("create", "update") and r.status in (200, 201)
    }
    assert writers == {leader.identity}  # no other candidate ever wrote the lease

    leader.kill()
    killed_at = time.time()
    successor = wait_for(
        lambda: [c for c in candidates if c is not leader and c.leading],
        timeout=30,
        what="a successor",
    )
    assert len(successor) == 1
    took = next(e["at"] for e in successor[0].events if e["event"] == "leading") - killed_at
    # A standby may take the lease once it has seen no renewal for a lease duration; it sees
    # renewals at most one retry period late.
    assert took <= LEASE_SECONDS + 2 * RETRY_SECONDS + 1.0, took
    wait_for(
        lambda: (
            kube_api.get("leases", "proxima-cluster-agent", "default")["spec"]["holderIdentity"]
            == successor[0].identity
        ),
        timeout=10,
    )
    assert len(_leaders(candidates)) == 1
