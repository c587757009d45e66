"""Background work with several Console replicas on one database (what broke: every replica ran
the timeout sweep). Two sweeps race on one real database file (and PostgreSQL in its lane),
each on its own engine as two processes would: the work is done once, never doubled."""

import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlmodel import Session, select

from console.bootstrap import bootstrap
from console.core.clock import utcnow
from console.core.db import make_engine, migrate
from console.core.settings import ConsoleSettings
from console.models import Agent, Lease, Rollout, RolloutTarget
from console.services.leases import acquire
from console.services.maintenance import Maintenance
from console.services.unit_of_work import UnitsOfWork
from contracts.vocabulary import RolloutState, TargetStatus

TARGETS = 40


@pytest.fixture
def db(database_url, tmp_path):
    migrate(database_url)
    engine = make_engine(database_url)
    with Session(engine) as session:
        made = bootstrap(session, client_name="acme", environment_name="prod")
    yield database_url, made
    engine.dispose()


def _overdue_rollout(url: str, made) -> str:
    """A running rollout whose 40 dispatched targets are all past their deadline."""
    engine = make_engine(url)
    past = utcnow() - timedelta(minutes=5)
    with Session(engine) as s:
        rollout = Rollout(
            client_id=made.client_id,
            environment_id=made.environment_id,
            name="race",
            target_version="0.9.0",
            seed="s",
            state=RolloutState.RUNNING.value,
            criteria=[{"failure_type": "timed_out", "threshold_count": 1}],
            waves=[{"index": 0, "kind": "canary", "size": TARGETS}],
        )
        s.add(rollout)
        for i in range(TARGETS):
            agent = Agent(
                client_id=made.client_id,
                environment_id=made.environment_id,
                agent_type="host",
                name=f"race-{i}",
            )
            s.add(agent)
            s.flush()
            s.add(
                RolloutTarget(
                    rollout_id=rollout.id,
                    agent_id=agent.id,
                    agent_name=agent.name,
                    wave=0,
                    status=TargetStatus.DISPATCHED.value,
                    command_id=f"{i:032d}",
                    dispatched_at=past,
                    deadline_at=past,
                )
            )
        s.commit()
        rollout_id = rollout.id
    engine.dispose()
    return rollout_id


def _replica(url: str, name: str) -> Maintenance:
    """One replica's background work on its own engine (its own connections, its own lock)."""
    settings = ConsoleSettings(database_url=url, rollout_sweep_seconds=0.5)
    rt = SimpleNamespace(
        settings=settings, units=UnitsOfWork(make_engine(url), serialize_writes=False)
    )
    return Maintenance(rt, holder=name)  # type: ignore[arg-type]


def _race(*jobs):
    """Run the coroutine functions at once, each in its own thread and event loop."""
    import asyncio

    results = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def run(i, job):
        barrier.wait()
        results[i] = asyncio.run(job())

    threads = [threading.Thread(target=run, args=(i, j)) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_two_timeout_sweeps_racing_expire_each_target_once_and_halt_once(db):
    url, made = db
    rollout_id = _overdue_rollout(url, made)
    a, b = _replica(url, "replica-a"), _replica(url, "replica-b")
    results = _race(a.expire_timeouts, b.expire_timeouts)
    done = [r for r in results if r is not None]
    assert done == [[rollout_id]], results  # one replica swept (and halted it), one stood by
    engine = make_engine(url)
    with Session(engine) as s:
        statuses = s.exec(
            select(RolloutTarget.status).where(RolloutTarget.rollout_id == rollout_id)
        ).all()
        rollout = s.get(Rollout, rollout_id)
        lease = s.get(Lease, "rollout-timeouts")
    engine.dispose()
    assert statuses == [TargetStatus.TIMED_OUT.value] * TARGETS
    assert rollout.state == RolloutState.STALLED.value
    assert lease.holder in ("replica-a", "replica-b")
    # the holder keeps it while it renews; the other takes over only once it expired
    holder, other = (a, b) if lease.holder == "replica-a" else (b, a)
    assert _race(other.expire_timeouts) == [None]
    assert _race(holder.expire_timeouts) == [[]]  # renewed; nothing left to do: idempotent


def test_a_lease_is_held_by_one_holder_until_it_expires(db):
    url, _ = db
    engine = make_engine(url)
    now = utcnow()

    def take(holder, at):
        with Session(engine) as s:
            got = acquire(s, "job", holder, ttl=10, now=at)
            s.commit()
            return got

    wins = []
    barrier = threading.Barrier(8)

    def contender(i):
        barrier.wait()
        wins.append((i, take(f"h{i}", now)))

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [i for i, won in wins if won]
    assert len(winners) == 1, wins
    assert take(f"h{winners[0]}", now + timedelta(seconds=5)), "the holder renews"
    assert not take("late", now + timedelta(seconds=14)), "renewed: still held"
    assert take("late", now + timedelta(seconds=16)), "expired: taken over"
    engine.dispose()


def test_two_resend_sweeps_racing_send_each_awaited_command_once(db):
    """Commands of dispatched targets without a result are sent again by one replica (the
    ``command-resends`` lease), each once per round, with its own command id."""
    url, made = db
    rollout_id = _overdue_rollout(url, made)
    artifact = {"version": "0.9.0", "url": "http://a.invalid/x.pyz", "sha256": "0" * 64}
    engine = make_engine(url)
    with Session(engine) as s:
        rollout = s.get(Rollout, rollout_id)
        rollout.artifact = {**artifact, "signature": "s" * 43}
        s.add(rollout)
        s.commit()
    engine.dispose()
    sent: dict[str, list[tuple[str, str]]] = {"replica-a": [], "replica-b": []}

    def replica(name: str) -> Maintenance:
        m = _replica(url, name)

        async def send_commands(sends, kind, args):
            assert args["rollout_id"] == rollout_id and args["version"] == "0.9.0"
            sent[name].extend(sends)

        m.rt.send_commands = send_commands
        return m

    a, b = replica("replica-a"), replica("replica-b")
    results = _race(a.resend_commands, b.resend_commands)
    assert sorted(results, key=str) == [TARGETS, None], results
    everything = sent["replica-a"] + sent["replica-b"]
    assert sorted(c for _a, c in everything) == [f"{i:032d}" for i in range(TARGETS)]
    holder = a if sent["replica-a"] else b
    assert _race(holder.resend_commands) == [0], "just sent: not again before the resend age"
