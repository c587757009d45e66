"""Outage transitions: one log line when a dependency goes, one when it is back."""

import logging

import pytest

from console.core.outages import Dependency


def test_one_line_per_transition_however_many_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="console.core.outages")
    db = Dependency("database")
    for _ in range(50):
        db.failed(ConnectionRefusedError(111, "Connection refused"))
    assert not db.up and db.up_since is None
    assert db.problem == "ConnectionRefusedError: [Errno 111] Connection refused"
    for _ in range(50):
        db.ok()
    assert db.up and db.up_since is not None and db.problem is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert (
        lines[0] == "database unavailable: ConnectionRefusedError: [Errno 111] Connection refused"
    )
    assert lines[1].startswith("database available again after ")


def test_coming_up_the_first_time_is_not_a_recovery(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="console.core.outages")
    nats = Dependency("nats", up=False)
    assert nats.up_since is None
    nats.ok()
    assert nats.up and caplog.records == []
