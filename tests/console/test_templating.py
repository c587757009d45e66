"""How the web UI writes times (what broke: "0.52 s ago")."""

from datetime import UTC, datetime, timedelta

from console.web.templating import ago

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def test_ago_is_written_in_whole_units():
    assert ago(NOW - timedelta(seconds=0.52), now=NOW) == "just now"
    assert ago(NOW - timedelta(seconds=4.4), now=NOW) == "4 s ago"
    assert ago(NOW - timedelta(seconds=42), now=NOW) == "42 s ago"
    assert ago(NOW - timedelta(minutes=12), now=NOW) == "12 min ago"
    assert ago(NOW - timedelta(days=3), now=NOW) == "3 d ago"
    assert ago(None) == "never"
    assert ago(datetime(2026, 12, 1, 11, 59, 55), now=NOW) == "5 s ago"  # naive is UTC
