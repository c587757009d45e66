"""``db.DriverStatement``: fixed SQL on the session's driver connection behaves as SQLAlchemy's
own statements do — values converted with the columns' types, in the session's transaction,
driver errors raised as SQLAlchemy's (which the unit of work and the error handlers know)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from console.core.db import DriverStatement, bind_value, make_engine, migrate
from console.models import RateCounter, table_of


@pytest.fixture
def session(database_url: str) -> Iterator[Session]:
    migrate(database_url)
    engine = make_engine(database_url)
    with Session(engine) as s:
        yield s
    engine.dispose()


def test_rows_are_converted_and_errors_are_sqlalchemys(session: Session) -> None:
    insert = DriverStatement(
        "INSERT INTO rate_counter (key, slot, count, previous, expires_at) VALUES (?, ?, 1, 0, ?)"
    )
    insert.rows(session, ("k", 1, 2.5))
    read = DriverStatement(
        "SELECT key, count, expires_at FROM rate_counter WHERE key = ?",
        (table_of(RateCounter).c.key,),
    )
    assert read.first(session, ("k",)) == ("k", 1, 2.5)
    assert read.first(session, ("missing",)) is None
    with pytest.raises(IntegrityError):
        insert.rows(session, ("k", 1, 2.5))


def test_a_datetime_goes_in_and_comes_back_aware_utc(session: Session) -> None:
    from console.models import InstallToken

    stamp = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    column = table_of(InstallToken).c.created_at
    echo = DriverStatement("SELECT ?", (column,))
    assert echo.first(session, (bind_value(session, column, stamp),)) == (stamp,)
