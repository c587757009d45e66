"""Upgrading an install that kept its NATS seeds in ``<data_dir>/nats-keys`` (one account for the
whole fleet): the first start imports them into the database, agents holding JWTs of the old
account keep working until they renew, and a revocation still cuts them."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime

import nats
import nkeys

from console.core.db import make_engine
from console.nats.jwt import agent_jwt
from console.services import nats_keys
from contracts import subjects
from testkit.console import ConsoleProcess, Identity
from testkit.waiting import await_for


def _seed(prefix: int) -> bytes:
    return bytes(nkeys.encode_seed(os.urandom(32), prefix))


async def test_an_old_installs_keys_are_imported_and_its_agents_jwts_still_work(tmp_path):
    data = tmp_path / "console"
    keys = data / "nats-keys"
    keys.mkdir(parents=True)
    seeds = {
        "operator.nk": _seed(nkeys.PREFIX_BYTE_OPERATOR),
        "system.nk": _seed(nkeys.PREFIX_BYTE_ACCOUNT),
        "fleet.nk": _seed(nkeys.PREFIX_BYTE_ACCOUNT),
    }
    for name, seed in seeds.items():
        (keys / name).write_bytes(seed)
    console = ConsoleProcess(
        data,
        env={"PROXIMA_AGENT_STALE_SECONDS": "5", "PROXIMA_ROTATION_TIMEOUT_SECONDS": "1"},
    ).start()
    try:
        engine = make_engine(console.database_url())
        try:
            authority = nats_keys.load_authority(engine)
        finally:
            engine.dispose()
        operator = nkeys.from_seed(bytearray(seeds["operator.nk"]))
        assert authority.operator.public_key == operator.public_key  # the trust did not change
        ident = Identity(name="old-1", machine_id="m-old-1")
        agent_id = ident.enroll(console, console.install_token()).json()["agent_id"]
        enrolled_at = console.agent(agent_id)["last_seen_at"]
        # The JWT an older Console signed with the fleet account still connects and is heard.
        fleet = nkeys.from_seed(bytearray(seeds["fleet.nk"]))
        ident.jwt = agent_jwt(fleet, agent_id=agent_id, public_key=ident.public_key)
        closed: list[float] = []

        async def on_closed() -> None:
            closed.append(time.monotonic())

        nc = await nats.connect(
            console.nats_url, **ident.nats_options(), allow_reconnect=False, closed_cb=on_closed
        )
        commands = await nc.subscribe(subjects.commands(agent_id))
        await nc.flush()
        beat = json.dumps(
            {
                "agent_id": agent_id,
                "instance_id": ident.instance_id,
                "agent_type": "host",
                "version": "0.8.0",
                "sent_at": datetime.now(UTC).isoformat(),
                "uptime_seconds": 1,
                "heartbeat_interval_seconds": 0.5,
            }
        )
        await nc.publish(subjects.heartbeat(agent_id), beat.encode())
        await nc.flush()
        await await_for(
            lambda: console.agent(agent_id)["last_seen_at"] != enrolled_at,
            what="a heartbeat through the legacy account",
        )

        # Commands reach it in the legacy account (rotate-credentials sends one; nobody answers).
        def rotate() -> int:
            with console.client() as c:
                return c.post(f"/api/v1/fleet/agents/{agent_id}/rotate-credentials").status_code

        asking = asyncio.create_task(asyncio.to_thread(rotate))
        command = json.loads((await commands.next_msg(timeout=10)).data)
        assert command["kind"] == "rotate_credentials"
        assert await asking == 504
        # A revocation is pushed into the legacy account too: the old JWT's connection is cut.
        with console.client() as c:
            assert c.post(f"/api/v1/fleet/agents/{agent_id}/revoke").status_code == 200
        await await_for(lambda: closed, timeout=10, what="the legacy connection cut")
    finally:
        console.stop()
