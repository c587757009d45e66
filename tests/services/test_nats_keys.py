"""NATS keys held once in the database: replicas racing to create the same key all end up
signing with the winner's (SQLite and, in the postgres lane, PostgreSQL)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sqlmodel import Session

from console.bootstrap import bootstrap
from console.core.db import make_engine, migrate
from console.services import nats_keys


def test_replicas_racing_for_the_same_keys_all_get_the_winners(database_url):
    migrate(database_url)
    setup = make_engine(database_url)
    with Session(setup) as session:
        env_id = bootstrap(session, client_name="acme", environment_name="prod").environment_id
    setup.dispose()
    engines = [make_engine(database_url) for _ in range(6)]  # one per "replica"
    start = threading.Barrier(len(engines))

    def replica(i: int) -> tuple[str, str, str]:
        start.wait()
        authority = nats_keys.load_authority(engines[i])
        if i % 2:
            account = nats_keys.environment_key(engines[i], env_id)
        else:
            account = nats_keys.environment_keys(engines[i], [env_id])[env_id]
        return (
            authority.operator.public_key.decode(),
            authority.system_public_key,
            account.public_key.decode(),
        )

    try:
        with ThreadPoolExecutor(len(engines)) as pool:
            seen = set(pool.map(replica, range(len(engines))))
    finally:
        for engine in engines:
            engine.dispose()
    assert len(seen) == 1, seen  # every replica signs with the same three keys
    operator, system, account = seen.pop()
    assert operator.startswith("O") and system.startswith("A") and account.startswith("A")
    assert len({operator, system, account}) == 3
