"""A batch split around its refused rows, against a real SQLite table; the write streak that
fails ``/readyz`` only once writes have failed for its window."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import create_engine, text

from console.core.outages import WriteStreak
from console.errors import ServiceUnavailableError
from console.ingest.rejections import RowFailures, isolate
from console.services.unit_of_work import UnitsOfWork
from contracts.vocabulary import ErrorReason


def _units(tmp_path: Path) -> UnitsOfWork:
    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE row (n INTEGER PRIMARY KEY CHECK (n % 7 != 0))"))
    return UnitsOfWork(engine, serialize_writes=True)


def _stored(units: UnitsOfWork) -> list[int]:
    with units.engine.connect() as conn:
        return [n for (n,) in conn.execute(text("SELECT n FROM row ORDER BY n"))]


def test_every_row_the_database_takes_is_written_and_each_refused_one_stands_alone(
    tmp_path: Path,
) -> None:
    units = _units(tmp_path)
    rows = list(range(1, 101))
    calls = 0

    async def write(part: list[int]) -> int:
        nonlocal calls
        calls += 1

        def insert(uow: object) -> int:
            for n in part:
                uow.session.connection().execute(text("INSERT INTO row VALUES (:n)"), {"n": n})  # type: ignore[attr-defined]
            return len(part)

        return await units.run(insert, write=True)

    done = asyncio.run(isolate(rows, write))
    refused = [n for n in rows if n % 7 == 0]
    assert _stored(units) == [n for n in rows if n % 7 != 0]
    assert sorted(row for row, _problem in done.failed) == refused
    assert all("CHECK constraint failed" in problem for _row, problem in done.failed)
    assert done.outage is None and done.unwritten == []
    assert calls <= 2 * 7 * len(refused), calls  # about 2 log2(n) per refused row


def test_an_outage_stops_the_writing_and_hands_back_what_was_not_tried() -> None:
    async def write(part: list[int]) -> None:
        if 3 in part:
            raise ServiceUnavailableError(ErrorReason.DATABASE_UNAVAILABLE, "down")
        if 1 in part and len(part) == 1:
            raise ValueError("refused")

    done = asyncio.run(isolate([1, 2, 3, 4], write))
    assert done.outage is not None
    assert sorted(
        done.unwritten + [r for r, _ in done.failed] + [r for p, _ in done.written for r in p]
    ) == [1, 2, 3, 4]
    assert 3 in done.unwritten


def test_a_row_is_dropped_after_its_attempts_and_a_write_forgets_its_failures() -> None:
    failures: RowFailures[str] = RowFailures(3)
    assert [failures.failed("a"), failures.failed("a")] == [False, False]
    failures.written("a")
    assert [failures.failed("a"), failures.failed("a"), failures.failed("a")] == [
        False,
        False,
        True,
    ]


def test_the_streak_fails_readiness_only_after_its_window_and_a_commit_ends_it() -> None:
    now = [0.0]
    streak = WriteStreak(10.0, clock=lambda: now[0])
    streak.started()
    streak.failed("database is locked")
    now[0] = 9.0
    assert streak.failing() is None, "a short outage does not flap readiness"
    streak.started()
    now[0] = 10.5
    problem = streak.failing()
    assert problem is not None and "database is locked" in problem
    streak.succeeded()
    assert streak.failing() is None
    streak.started()  # a write hung on a lock is failing too, once past the window
    now[0] = 25.0
    assert "still running" in (streak.failing() or "")
