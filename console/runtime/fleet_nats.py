"""The Console's NATS side: its server (embedded and supervised, or external), the accounts it
pushes, and its connections into every environment's account.

- Trust: the operator and system account are the same for every replica (keys in the database,
  ``console.services.nats_keys``); the servers' config (``NatsAuthority.render_config``) never
  changes, and each account JWT is pushed through the system account (``ClaimsPusher``).
- Environments: one NATS account each. The Console links into every one (``AccountLinks``) at
  start and notices new ones every ``nats_account_poll_seconds``; enrollment into a new
  environment links it at once. A message's environment is the account it arrived in, and must
  match the agent's record (``EnvironmentIndex``).
- After any reconnect of the system connection (a server restart inside or outside the Console)
  every account is pushed again, and again every ``nats_claims_resync_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

import nats
import nkeys
from nats.aio.client import Client as NatsClient
from prometheus_client import Counter, Histogram

from console.core.outages import Dependency
from console.core.settings import ConsoleSettings
from console.core.stop_signals import stop_requested
from console.errors import ServiceUnavailableError
from console.ingest import Ingester
from console.nats.accounts import AccountLinks
from console.nats.claims import ClaimsPusher
from console.nats.connection_guard import ACCOUNT_EVENTS, ConnectionGuard
from console.nats.jwt import NatsAuthority, UserLimits, agent_jwt
from console.nats.server import EmbeddedNats, NatsServerError
from console.services import nats_keys
from console.services.unit_of_work import UnitsOfWork
from contracts import subjects

log = logging.getLogger(__name__)

AUTH_ERRORS = "$SYS.SERVER.*.CLIENT.AUTH.ERR"
# Console replicas share the ingest work: each message goes to one of them (per account).
INGEST_QUEUE = "proxima-console-ingest"

FOREIGN = Counter(
    "proxima_messages_wrong_environment_total",
    "Agent messages dropped because the account they arrived in is not the agent's environment",
)
UNCHECKED = Counter(
    "proxima_messages_unchecked_total",
    "Agent messages not taken because the database was unavailable to check their environment",
)
LINK_SECONDS = Histogram(
    "proxima_nats_environment_link_seconds",
    "Creating (first use), pushing and connecting environments' NATS accounts, per round",
)
LINKS_AT_ONCE = 16  # connections opened concurrently at start (one per environment account)
_LEGACY_SETTINGS = ("nats_auth_file", "nats_pid_file", "nats_monitor_url")

Handler = Callable[[Any], Awaitable[None]]


class EnvironmentIndex:
    """Which environment each agent belongs to, from the database (records never move)."""

    def __init__(self, units: UnitsOfWork) -> None:
        self._units = units
        self._env: dict[str, str] = {}

    async def load_all(self) -> None:
        found = await self._units.run(lambda u: nats_keys.environment_of_agents(u.session))
        self._env.update(found)

    def known(self, agent_id: str) -> str | None:
        """The agent's environment if already loaded (no database work)."""
        return self._env.get(agent_id)

    async def of(self, agent_ids: list[str]) -> dict[str, str]:
        missing = [a for a in set(agent_ids) if a not in self._env]
        if missing:
            if len(self._env) > 500_000:
                self._env.clear()
            found = await self._units.run(
                lambda u: nats_keys.environment_of_agents(u.session, missing)
            )
            self._env.update(found)
        return {a: self._env[a] for a in agent_ids if a in self._env}


class FleetNats:
    def __init__(self, settings: ConsoleSettings, units: UnitsOfWork, ingester: Ingester) -> None:
        self.settings = settings
        self.units = units
        self.ingester = ingester
        self.embedded: EmbeddedNats | None = None
        self.authority: NatsAuthority | None = None
        self.sys_nc: NatsClient | None = None
        self.guard: ConnectionGuard | None = None
        self.pusher: ClaimsPusher | None = None
        self.links: AccountLinks | None = None
        self.index = EnvironmentIndex(units)
        self.url = ""
        self._accounts: dict[str | None, Any] = {}  # environment id -> account key
        # account name -> (its revocations, its signed JWT): a round re-signs only what changed
        self._signed: dict[str, tuple[tuple[tuple[str, int], ...], str]] = {}
        self._sync_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        # Called (in a task of its own) after the system connection reconnects: the runtime
        # resends commands the server may have lost (``services.rollouts.resend``).
        self.on_reconnected: Callable[[], Coroutine[Any, Any, None]] | None = None
        # Whether the Console hears the fleet: the system connection to the server(s), which
        # every account connection shares the fate of; ``/readyz`` and the timeout sweep read it.
        self.health = Dependency("nats", up=False)

    async def start(self, seed: bytes) -> None:
        s = self.settings
        for name in _LEGACY_SETTINGS:
            if getattr(s, name, None):
                log.warning(
                    "PROXIMA_%s is no longer used: the Console pushes account JWTs through the "
                    "system account (run `proxima-console nats-config` for the servers' "
                    "config; see docs/nats.md)",
                    name.upper(),
                )
        engine = self.units.engine
        self.authority = await asyncio.to_thread(
            nats_keys.load_authority, engine, s.data_dir / "nats-keys"
        )
        if s.nats_url is None:
            self.embedded = EmbeddedNats(
                workdir=s.data_dir / "nats",
                port=s.nats_port,
                max_payload=s.nats_max_payload,
                trust=self.authority.render_config(),
            )
            await self.embedded.start()
            self.url = self.embedded.client_url
            self._tasks.append(asyncio.create_task(self.embedded.supervise(), name="nats-super"))
        else:
            self.url = s.nats_url
        await self._connect_system(seed)
        self.links = AccountLinks(servers=self.servers, seed=seed, setup=self._subscribe)
        await self.index.load_all()
        await self.sync()
        self._tasks.append(asyncio.create_task(self._poll(), name="nats-accounts"))

    @property
    def servers(self) -> list[str]:
        """``PROXIMA_NATS_URL`` may name every node of a cluster, comma-separated."""
        return [u.strip() for u in self.url.split(",") if u.strip()]

    async def _connect_system(self, seed: bytes) -> None:
        """The system-account user: pushes claims, kicks, reads advisories."""
        assert self.authority is not None
        console_pub = _public(seed)
        system_jwt = self.authority.system_user_jwt(console_pub).encode()

        async def reconnected() -> None:
            log.warning("nats system connection reconnected: pushing every account again")
            self.health.ok()
            if self.guard is not None:
                self.guard.reset()
            if self.pusher is not None:
                self.pusher.push_all()
            if self.on_reconnected is not None:
                self._tasks = [t for t in self._tasks if not t.done()]
                self._tasks.append(asyncio.create_task(self.on_reconnected(), name="nats-resend"))

        async def disconnected() -> None:
            self.health.failed("connection to the server lost; reconnecting")

        await self._until_reachable()
        try:
            self.sys_nc = await nats.connect(
                self.servers,
                nkeys_seed_str=seed.decode(),
                user_jwt_cb=lambda: system_jwt,
                name="proxima-console-system",
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                reconnected_cb=reconnected,
                disconnected_cb=disconnected,
            )
        except (OSError, nats.errors.Error) as exc:
            raise NatsServerError(
                f"cannot reach NATS at {self.url} ({exc.__class__.__name__}: {exc}): check "
                "PROXIMA_NATS_URL, and that the server runs the trust printed by "
                "`proxima-console nats-config`"
            ) from exc
        self.health.ok()
        sys_nc = self.sys_nc

        async def request(subject: str, data: bytes) -> bytes:
            return bytes((await sys_nc.request(subject, data, timeout=5.0)).data)

        self.pusher = ClaimsPusher(load=self._claims, version=self._version, request=request)
        self.pusher.start()
        await sys_nc.subscribe(AUTH_ERRORS, queue=INGEST_QUEUE, cb=self.ingester.on_auth_error)
        self.guard = ConnectionGuard(
            limit=self.settings.nats_agent_max_connections,
            request=lambda subject, data: sys_nc.request(subject, data, timeout=2.0),
            exempt={console_pub},
        )
        await sys_nc.subscribe(ACCOUNT_EVENTS, cb=self.guard.on_event)

    async def _until_reachable(self, every: float = 2.0) -> None:
        """Wait until a NATS server accepts TCP connections, saying so once: an external
        server may start after the Console (no bring-up order to follow). Gives up after
        ``PROXIMA_NATS_CONNECT_WAIT_SECONDS`` with one line, and at once on SIGTERM/SIGINT."""
        with stop_requested() as stop:
            waiting = asyncio.create_task(self._poll_reachable(every))
            stopping = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (waiting, stopping):
                    task.cancel()
            if not waiting.cancelled() and waiting.done():
                waiting.result()  # reachable, or the one-line error
                return
            raise NatsServerError(
                f"stopped while waiting for NATS at {self.url} to accept a connection"
            )

    async def _poll_reachable(self, every: float) -> None:
        waiting = False
        deadline = time.monotonic() + self.settings.nats_connect_wait_seconds
        while True:
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"no NATS server at {self.url} accepted a connection within "
                    f"{self.settings.nats_connect_wait_seconds:.0f} s: check PROXIMA_NATS_URL "
                    "and that the servers run (their trust: `proxima-console nats-config`)"
                )
            for url in self.servers:
                parts = urlsplit(url if "://" in url else f"nats://{url}")
                try:
                    _r, writer = await asyncio.wait_for(
                        asyncio.open_connection(parts.hostname, parts.port or 4222), every
                    )
                except (OSError, TimeoutError):
                    continue
                writer.close()
                if waiting:
                    log.warning("nats at %s is reachable: connecting", url)
                return
            if not waiting:
                log.warning(
                    "nats at %s is not reachable yet; waiting for it (retrying every %.0f s)",
                    self.url,
                    every,
                )
                waiting = True
            await asyncio.sleep(every)

    async def _version(self) -> int:
        return await self.units.run(lambda u: nats_keys.claims_version(u.session))

    async def _claims(self) -> tuple[int, list[tuple[str, str]]]:
        assert self.authority is not None
        authority = self.authority
        version, states = await self.units.run(
            lambda u: (nats_keys.claims_version(u.session), nats_keys.account_states(u.session))
        )
        for state in states:
            self._accounts.setdefault(state.environment_id, state.key)
        claims = []
        for st in states:
            content = tuple(sorted(st.revocations.items()))
            cached = self._signed.get(st.name)
            if cached is None or cached[0] != content:
                cached = (content, authority.account_jwt(st.key, st.name, st.revocations))
                self._signed[st.name] = cached
            claims.append((st.public_key, cached[1]))
        return version, claims

    async def sync(self) -> None:
        """Every environment has an account, pushed, and a link into it."""
        assert self.pusher is not None and self.links is not None
        async with self._sync_lock:
            started = time.perf_counter()
            env_ids = await self.units.run(lambda u: nats_keys.environment_ids(u.session))
            new = [e for e in env_ids if e not in self._accounts]
            if new:
                self._accounts.update(
                    await asyncio.to_thread(nats_keys.environment_keys, self.units.engine, new)
                )
            keyed = time.perf_counter()
            if new or not self.links.items():
                await self.pusher.apply()  # also learns the legacy account, if imported
            pushed = time.perf_counter()
            links = self.links
            gate = asyncio.Semaphore(LINKS_AT_ONCE)

            async def link(env: str | None, key: Any) -> None:
                async with gate:
                    await links.link(env, key)

            await asyncio.gather(
                *(link(env, key) for env, key in list(self._accounts.items()) if env not in links)
            )
            if new:
                done = time.perf_counter()
                LINK_SECONDS.observe(done - started)
                log.info(
                    "nats: %d environment account(s) linked in %.3f s (keys %.3f s, push %.3f s, "
                    "connections %.3f s)",
                    len(new),
                    done - started,
                    keyed - started,
                    pushed - keyed,
                    done - pushed,
                )

    async def _poll(self) -> None:
        s = self.settings
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(s.nats_account_poll_seconds)
            try:
                if time.monotonic() - last_full >= s.nats_claims_resync_seconds:
                    assert self.pusher is not None
                    self.pusher.push_all()
                    last_full = time.monotonic()
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("nats account sync failed (retrying): %s", exc)

    async def _subscribe(self, nc: NatsClient, environment_id: str | None) -> None:
        """The one place the Console subscribes to agents, in one environment's account."""
        ing = self.ingester
        for subject, cb, queue in (
            (subjects.ALL_HEARTBEATS, ing.on_heartbeat, INGEST_QUEUE),
            (subjects.ALL_METRICS, ing.on_metrics, INGEST_QUEUE),
            (subjects.ALL_RESULTS, ing.on_result, INGEST_QUEUE),
            (subjects.ALL_INVENTORY, ing.on_inventory, ""),
        ):
            await nc.subscribe(subject, queue=queue, cb=self._gate(environment_id, cb))

    def _gate(self, environment_id: str | None, cb: Handler) -> Handler:
        """Pass on a message only when its agent belongs to the account's environment. The
        legacy account (``None``) holds agents of every environment: the subject permission
        each agent's JWT carries is what binds it there."""
        if environment_id is None:
            return cb

        async def handler(msg: Any) -> None:
            try:
                agent_id = subjects.agent_id_of(msg.subject)
            except ValueError:
                await cb(msg)  # the ingester counts it as rejected
                return
            env = self.index.known(agent_id)
            if env is None:
                try:
                    env = (await self.index.of([agent_id])).get(agent_id)
                except ServiceUnavailableError:
                    # The database is down (its outage is logged once where it is noticed):
                    # an agent not yet known cannot be checked, so its message is not taken.
                    # Nothing is lost: a result is acknowledged only after its commit, so the
                    # agent sends it again; heartbeats come again on their own.
                    UNCHECKED.inc()
                    return
            if env != environment_id:
                FOREIGN.inc()
                log.warning(
                    "message from agent %s in environment %s's account dropped: not its "
                    "environment",
                    agent_id,
                    environment_id,
                )
                return
            await cb(msg)

        return handler

    async def ensure_environment(self, environment_id: str) -> Any:
        """The environment's account key, its account pushed and linked (first use: now)."""
        if self.links is None or environment_id not in self.links:
            await self.sync()
        return self._accounts[environment_id]

    async def agent_jwt(self, agent_id: str, public_key: str, environment_id: str) -> str:
        account = await self.ensure_environment(environment_id)
        s = self.settings
        limits = UserLimits(
            subs=s.nats_agent_max_subscriptions,
            payload=s.nats_max_payload,
            ttl_seconds=s.nats_agent_jwt_ttl_seconds,
        )
        return agent_jwt(account, agent_id=agent_id, public_key=public_key, limits=limits)

    async def apply(self) -> None:
        assert self.pusher is not None
        await self.pusher.apply()

    async def publish(self, messages: list[tuple[str, str, bytes]]) -> None:
        """(agent id, subject, payload): each into its agent's environment account, and into the
        legacy account while one exists (an agent not yet renewed listens there).

        Returns once the messages are in the connections' buffers, which nats-py's flusher
        writes at once; no PING/PONG flush. A flush only said "the server read them", never "the
        agent got them": what makes a command arrive is its result (acknowledged after the
        Console's commit) and the resends of commands without one (``services.rollouts.resend``:
        every ``command_resend_seconds``, and at once after NATS reconnects); a rotation waits
        for its agent's answer with a timeout. A publish on a closed connection still raises.
        """
        assert self.links is not None
        links = self.links
        legacy = links.get(None)
        index = self.index
        missing = [a for a, _s, _d in messages if index.known(a) is None]
        if missing:
            await index.of(missing)
        for agent_id, subject, data in messages:
            if legacy is not None:
                await legacy.publish(subject, data)
            env_id = index.known(agent_id)
            if env_id is None:
                continue  # no record (deleted): only the legacy account may still hear it
            nc = links.get(env_id)
            if nc is None:
                await self.ensure_environment(env_id)
                nc = links.get(env_id)
            if nc is not None:
                await nc.publish(subject, data)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.pusher is not None:
            await self.pusher.stop()
        if self.sys_nc is not None:
            try:
                await self.sys_nc.close()
            except Exception:
                log.debug("nats system connection close failed", exc_info=True)
        if self.links is not None:
            await self.links.close()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)


def _public(seed: bytes) -> str:
    return str(nkeys.from_seed(bytearray(seed)).public_key.decode())
