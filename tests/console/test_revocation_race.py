"""The same-second revocation race between replicas: replica B renders its account
JWT from the database *before* replica A's revocation commits, and B's push lands *after* A's.
A server takes the last JWT pushed to it, so it held B's list without the revocation and the
revoked agent could connect again until the next full push (every minute).

Now a push round ends by reading the database's claims version and runs again while it is newer
than what it rendered (``ClaimsPusher.push_changed``), and each revocation's stamp (the JWT's
``iat``, which the cluster's own sync compares) is strictly above every earlier one, even in the
same second and across replicas (``agent_records.revocation_stamp``, under a row lock)."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import nats
import nkeys
import pytest
from sqlmodel import Session, select

from console.core.db import make_engine, migrate
from console.models import Agent, NatsRevocation
from console.nats.claims import ClaimsPusher
from console.nats.jwt import agent_jwt, decode_claims
from console.nats.server import EmbeddedNats
from console.services import nats_keys
from console.services.identities.lifecycle import revoke
from testkit.net import free_port
from testkit.services import AgentKey


def _replica_pusher(services, authority, request, before_render=None) -> ClaimsPusher:
    """A replica's pusher on the shared database (what ``FleetNats`` builds)."""

    async def load():
        def read(u):
            return nats_keys.claims_version(u.session), nats_keys.account_states(u.session)

        version, states = await services.run(read)
        if before_render is not None:
            await before_render()
        claims = [
            (st.public_key, authority.account_jwt(st.key, st.name, st.revocations)) for st in states
        ]
        return version, claims

    async def version():
        return await services.run(lambda u: nats_keys.claims_version(u.session))

    return ClaimsPusher(load=load, version=version, request=request)


async def _revoke(services, agent_id: str, now: datetime) -> None:
    await services.run(
        lambda u: revoke(u.session, agent=u.session.get(Agent, agent_id), actor="t", now=now),
        write=True,
    )


async def test_a_stale_push_landing_last_never_undoes_a_revocation(services, tmp_path: Path):
    engine = services.rt.units.engine
    authority = nats_keys.load_authority(engine)
    account = nats_keys.environment_key(engine, services.principal.environment_id)
    account_pub = account.public_key.decode()
    server = EmbeddedNats(
        workdir=tmp_path / "nats", port=free_port(), max_payload=1 << 20,
        trust=authority.render_config(),
    )  # fmt: skip
    await server.start()
    console_seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    console_pub = nkeys.from_seed(bytearray(console_seed)).public_key.decode()
    system_jwt = authority.system_user_jwt(console_pub).encode()
    sys_nc = await nats.connect(
        server.client_url,
        nkeys_seed_str=console_seed.decode(),
        user_jwt_cb=lambda: system_jwt,
        allow_reconnect=False,
    )
    landed: list[str] = []  # who pushed, in the order the server got it

    def request_as(who: str):
        async def request(subject: str, data: bytes) -> bytes:
            landed.append(who)
            return bytes((await sys_nc.request(subject, data, timeout=5)).data)

        return request

    async def held() -> dict:
        lookup = await sys_nc.request(f"$SYS.REQ.ACCOUNT.{account_pub}.CLAIMS.LOOKUP", b"", 3)
        return decode_claims(lookup.data.decode())

    try:
        token = await services.install_token()
        keys = {name: AgentKey(name) for name in ("x", "y")}
        ids = {}
        for name, key in keys.items():
            enrolled, _ = await services.enroll(key, token)
            ids[name] = enrolled.agent_id
        # The credentials the agents hold, issued before any revocation.
        jwts = {
            name: agent_jwt(account, agent_id=ids[name], public_key=key.public_key).encode()
            for name, key in keys.items()
        }

        async def connect(name: str):
            jwt = jwts[name]
            return await nats.connect(
                server.client_url,
                nkeys_seed_str=keys[name].seed.decode(),
                user_jwt_cb=lambda: jwt,
                allow_reconnect=False,
                connect_timeout=3,
            )

        same_second = datetime.now(UTC).replace(microsecond=0)
        replica_a = _replica_pusher(services, authority, request_as("A"))
        await _revoke(services, ids["y"], same_second)
        await replica_a.push_changed()
        x_nc = await connect("x")  # X holds a live connection
        await x_nc.close()
        iat_before = (await held())["iat"]

        async def a_revokes_x_meanwhile() -> None:
            # B has read the database; A's revocation commits, in the same second, and A's
            # push lands before B's.
            await _revoke(services, ids["x"], same_second)
            await replica_a.push_changed()

        once = [a_revokes_x_meanwhile]

        async def before_b_renders() -> None:
            while once:
                await once.pop()()

        replica_b = _replica_pusher(services, authority, request_as("B"), before_b_renders)
        await replica_b.push_changed()
        final = await held()
        assert set(final["nats"]["revocations"]) == {keys["x"].public_key, keys["y"].public_key}
        assert landed == ["A", "A", "B", "B"], "B's stale list landed after A's, then B's check"
        assert replica_b.rechecks == 1
        assert final["iat"] > iat_before, "the newer state carries the larger iat"
        with pytest.raises(Exception):  # noqa: B017 - refused, however nats-py says it
            again = await connect("x")
            await again.close()
        stamps = final["nats"]["revocations"]
        y_stamp, x_stamp = stamps[keys["y"].public_key], stamps[keys["x"].public_key]
        assert x_stamp == y_stamp + 1 == int(same_second.timestamp()) + 1
    finally:
        await sys_nc.close()
        server.stop()


def _two_agents(url: str) -> tuple[list[str], datetime]:
    from console.bootstrap import bootstrap

    migrate(url)
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            made = bootstrap(s, client_name="acme", environment_name="prod")
        nats_keys.load_authority(engine)  # the operator row the stamp locks
        ids = []
        with Session(engine) as s:
            for name in ("a", "b"):
                agent = Agent(
                    client_id=made.client_id,
                    environment_id=made.environment_id,
                    agent_type="host",
                    name=name,
                    nats_public_key=AgentKey(name).public_key,
                    version="0.8.0",
                )
                s.add(agent)
                s.flush()
                ids.append(agent.id)
            s.commit()
    finally:
        engine.dispose()
    return ids, datetime.now(UTC).replace(microsecond=0)


@pytest.mark.postgres
def test_concurrent_revocations_on_two_replicas_get_ordered_stamps(postgres):
    """Two transactions (two replicas' engines) revoking in the same second: the second waits
    for the first's lock and takes a larger stamp, so their JWTs never tie."""
    url = postgres.create_database()
    (a_id, b_id), now = _two_agents(url)
    one, two = make_engine(url), make_engine(url)
    try:
        with Session(one) as s1:
            revoke(s1, agent=s1.get(Agent, a_id), actor="replica-a", now=now)
            s1.flush()  # the stamp taken, the lock held, not committed

            def second() -> None:
                with Session(two) as s2:
                    revoke(s2, agent=s2.get(Agent, b_id), actor="replica-b", now=now)
                    s2.commit()

            worker = threading.Thread(target=second)
            worker.start()
            worker.join(timeout=1.0)
            assert worker.is_alive(), "the second revocation waits for the first's lock"
            s1.commit()
        worker.join(timeout=30)
        assert not worker.is_alive()
        with Session(one) as s:
            stamp = {r.agent_id: r.revoked_at for r in s.exec(select(NatsRevocation)).all()}
        assert stamp[a_id] == int(now.timestamp())
        assert stamp[b_id] == stamp[a_id] + 1, stamp
    finally:
        one.dispose()
        two.dispose()
