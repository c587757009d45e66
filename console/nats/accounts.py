"""The Console's connections into the environments' NATS accounts: one per account.

Every environment is its own NATS account, so nothing one environment's agents publish is even
visible in another's. The Console holds one user in each account (its own key, a user JWT signed
by that account) and one connection per account, opened when the account is first pushed: at
start for every environment, and later for each new one (``AccountLinks.link``). What arrives on
a connection belongs to that connection's environment: the account, not the message, says so.

Subscriptions are made in one place, the ``setup`` callback the Console passes (it is called
again for a connection that reconnects, as the client library re-subscribes by itself).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import nkeys
from nats.aio.client import Client as NatsClient

from console.nats.jwt import console_jwt

log = logging.getLogger(__name__)

Setup = Callable[[NatsClient, str | None], Awaitable[None]]


class AccountLinks:
    """One NATS connection per account, keyed by environment id (``None``: the legacy account
    of installs before per-environment accounts)."""

    def __init__(self, *, servers: list[str], seed: bytes, setup: Setup) -> None:
        self._servers = servers
        self._seed = seed
        self._public = str(nkeys.from_seed(bytearray(seed)).public_key.decode())
        self._setup = setup
        self._links: dict[str | None, NatsClient] = {}

    @property
    def public_key(self) -> str:
        return self._public

    def __contains__(self, environment_id: str | None) -> bool:
        return environment_id in self._links

    def get(self, environment_id: str | None) -> NatsClient | None:
        return self._links.get(environment_id)

    def items(self) -> list[tuple[str | None, NatsClient]]:
        return list(self._links.items())

    async def link(self, environment_id: str | None, account: Any) -> NatsClient:
        """The connection into ``account`` (its JWT must have been pushed), opened once. The
        caller serialises links of one environment (``FleetNats.sync``)."""
        nc = self._links.get(environment_id)
        if nc is not None:
            return nc
        token = console_jwt(account, self._public).encode()
        label = environment_id or "legacy"
        nc = await nats.connect(
            self._servers,
            nkeys_seed_str=self._seed.decode(),
            user_jwt_cb=lambda: token,
            name=f"proxima-console:{label}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            disconnected_cb=_log_cb(f"nats link {label} disconnected"),
            reconnected_cb=_log_cb(f"nats link {label} reconnected"),
        )
        await self._setup(nc, environment_id)
        self._links[environment_id] = nc
        return nc

    async def close(self) -> None:
        for _env, nc in self.items():
            try:
                await nc.drain()
            except Exception:  # the server may already be gone
                log.debug("nats drain failed", exc_info=True)
        self._links.clear()


def _log_cb(text: str) -> Callable[[], Awaitable[None]]:
    async def cb() -> None:
        log.warning(text)

    return cb
