"""A heartbeat's instant is stored as the ORM stores every other instant (found in session 5:
the heartbeat fast path took the generic column type's conversion, so SQLite's driver wrote
``… 01:32:37.571139+00:00`` beside the ORM's ``… 01:32:37.571139`` in the same column; SQLite
compares that text as text, in every "seen since" filter)."""

from __future__ import annotations

import re

from sqlalchemy import text

from testkit.services import InProcessConsole

SQLITE_INSTANT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")


async def test_last_seen_is_written_in_the_orms_text(services: InProcessConsole) -> None:
    agent_id = (await services.add_agents(1)).popitem()[1]
    services.clock.advance(5)
    await services.heartbeat(agent_id)

    def stored(uow) -> tuple[str, str, str]:
        row = uow.session.execute(
            text("SELECT enrolled_at, last_seen_at, last_heartbeat_at FROM agent WHERE id = :i"),
            {"i": agent_id},
        ).one()
        return tuple(row)

    enrolled, seen, beat = await services.run(stored)
    assert SQLITE_INSTANT.match(enrolled), enrolled  # the ORM's text
    assert SQLITE_INSTANT.match(seen), seen
    assert SQLITE_INSTANT.match(beat), beat
    assert seen > enrolled
