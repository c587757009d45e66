"""The NATS session: one connection per agent identity, kept alive by a supervisor we own.

nats-py's built-in reconnect is switched off. It would retry a refused key forever without
telling us, and we need to act on that refusal: report it on ``/readyz``, fall back to a
pending rotated key, and reconnect with new credentials after a rotation. Instead the supervisor
below connects, waits for the connection to close, and connects again with an explicit
:class:`ReconnectPolicy`. Subscriptions are made again on every connection.

States (:class:`SessionState`)::

    idle → connecting → connected → disconnected → connecting → …
                     ↘ unauthorized (key refused) → connecting → …
                     ↘ retired (key refused, and the Console says it is not the identity's key
                       any more: re-bound elsewhere, revoked, released) — no more attempts
    any → closed (stop)

A refused key is never retried blindly: the session asks the Console for a fresh JWT first
(``fetch_jwt``); a Console refusal ends it in ``retired``, with the Console's words, logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from agent.credentials import public_key
from agent.errors import IdentityRetiredError, NatsAuthorizationError, NatsConnectError
from agent.health import Readiness
from agent.nats_links import ReconnectPolicy, display_url, returning
from agent.nats_links import describe_error as _describe
from agent.nats_links import first_of as _first
from agent.renewal import refresh_if_expiring, renew_before_expiry
from agent.state import StateStore
from contracts import subjects
from contracts.backoff import RetryLog
from contracts.durations import format_duration

__all__ = ["NatsSession", "ReconnectPolicy", "SessionState"]

log = logging.getLogger(__name__)

_AUTH_VIOLATION = "authorization violation"
# Errors that just mean "the connection went away": the supervisor reports those itself.
_DISCONNECT_ERRORS: tuple[type[BaseException], ...] = (
    nats.errors.UnexpectedEOF,
    nats.errors.ConnectionClosedError,
    nats.errors.StaleConnectionError,
    OSError,
    asyncio.TimeoutError,
)


class SessionState(StrEnum):
    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    UNAUTHORIZED = "unauthorized"
    RETIRED = "retired"
    CLOSED = "closed"


class NatsSession:
    """Keeps this agent connected; publishes only under its own subject prefix."""

    def __init__(
        self,
        store: StateStore,
        readiness: Readiness,
        *,
        policy: ReconnectPolicy,
        on_message: Callable[[str, bytes], None],
        retry_log: RetryLog | None = None,
        trial: bool = False,
        fetch_jwt: Callable[[str, str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.store = store
        # Asks the Console for a JWT for a key (agent id, seed) when the state holds none for it:
        # after a rotation whose answer was lost, say. None: no way to ask (tests, trials).
        self.fetch_jwt = fetch_jwt
        # A build under trial proves it can connect with the identity, and nothing more: it
        # subscribes to nothing (commands belong to the running agent) and writes no state.
        self.trial = trial
        self.readiness = readiness
        self.policy = policy
        self._on_message = on_message
        self._retry_log = retry_log or RetryLog()
        self._client: Client | None = None
        self._closed: asyncio.Event | None = None  # set when ``_client`` has closed
        self._key: str | None = None  # public key of the live connection
        self._state = SessionState.IDLE
        self._stop = asyncio.Event()
        self._reconnect = asyncio.Event()
        self._reconnect_reason = ""
        self._connected = asyncio.Event()
        self._on_connected: list[Callable[[], None]] = []
        self.connects = 0  # connections made
        self.attempts = 0  # connect attempts, successful or not

    # -- public surface -------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def connected_key(self) -> str | None:
        """Public key of the live connection, ``None`` when not connected."""
        return self._key if self._state is SessionState.CONNECTED else None

    @property
    def max_payload(self) -> int | None:
        """The server's ``max_payload`` (from its INFO) on the live connection, else ``None``."""
        client = self._client
        if client is None or self._state is not SessionState.CONNECTED:
            return None
        return int(client.max_payload)

    @property
    def agent_id(self) -> str:
        return self.store.current.agent_id

    def on_connected(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every (re)connection, once subscriptions are in place."""
        self._on_connected.append(callback)

    async def wait_connected(self) -> None:
        await self._connected.wait()

    def request_reconnect(self, reason: str) -> None:
        """Drop the connection and connect again with the credentials now in the state."""
        self._reconnect_reason = reason
        self._reconnect.set()

    def use_current_credentials(self, reason: str) -> None:
        """Reconnect if the live connection still uses a key other than the state's.

        After a rotation the Console usually cuts the old connection itself, and the session
        has already come back with the new key; then there is nothing to do.
        """
        if self._client is not None and self._key != self.store.current.public_key:
            self.request_reconnect(reason)

    async def stop(self) -> None:
        self._stop.set()

    def _check_subject(self, subject: str) -> None:
        prefix = subjects.agent_prefix(self.agent_id) + "."
        if not subject.startswith(prefix):
            raise ValueError(f"agent may publish only under {prefix}>, not {subject}")

    async def publish(self, subject: str, payload: bytes) -> bool:
        """Queue ``payload`` on ``subject``; ``False`` when not connected."""
        self._check_subject(subject)
        client = self._client
        if client is None or self._state is not SessionState.CONNECTED:
            return False
        try:
            await client.publish(subject, payload)
        except (nats.errors.Error, OSError) as e:
            log.debug("nats publish to %s failed: %s", subject, e)
            return False
        return True

    async def request(self, subject: str, payload: bytes, wait: float) -> bytes | None:
        """A request under our prefix; the reply lands in this agent's own inbox
        (``subjects.agent_inbox_prefix``). ``None``: not connected, no responder, no answer
        in ``wait`` seconds, or the connection went away (the caller retries)."""
        self._check_subject(subject)
        client = self._client
        if client is None or self._state is not SessionState.CONNECTED:
            return None
        try:
            reply = await client.request(subject, payload, timeout=wait)
        except (nats.errors.Error, OSError, TimeoutError) as e:
            log.debug("nats request to %s failed: %s", subject, _describe(e))
            return None
        return bytes(reply.data)

    async def publish_confirmed(self, subject: str, payload: bytes, wait: float = 5.0) -> bool:
        """Publish and wait until the server has seen it (a flush round trip)."""
        client, closed = self._client, self._closed
        if client is None or closed is None or not await self.publish(subject, payload):
            return False
        # nats-py's flush does not notice a connection that dies under it: race the two.
        flush = asyncio.ensure_future(client.flush(timeout=max(1, round(wait))))
        gone = asyncio.ensure_future(closed.wait())
        try:
            await asyncio.wait({flush, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not flush.done():
            flush.cancel()
            log.debug("nats connection closed before publish to %s was confirmed", subject)
            return False
        error = flush.exception()
        if error is not None:
            log.debug("nats flush after publish to %s failed: %s", subject, error)
            return False
        return True

    # -- supervisor -----------------------------------------------------------------------

    def _set_state(self, state: SessionState, problem: str | None = None) -> None:
        if state is not self._state:
            log.debug("nats session %s -> %s", self._state, state)
        self._state = state
        if state is SessionState.CONNECTED:
            self._connected.set()
            self.readiness.set_nats(True)
        else:
            self._connected.clear()
            self.readiness.set_nats(False, problem)

    async def run(self) -> None:
        """Connect, stay connected, reconnect; returns after :meth:`stop`."""
        backoff = self.policy.backoff()
        attempt = 0
        ever_connected = False
        self._set_state(SessionState.CONNECTING, "nats connecting")
        try:
            while not self._stop.is_set():
                url = self.store.current.nats_url
                try:
                    client, closed = await self._connect_current()
                except IdentityRetiredError as e:
                    self._retire(e)
                    break
                except NatsAuthorizationError:
                    step = backoff.step(attempt)
                    self._set_state(
                        SessionState.UNAUTHORIZED,
                        "nats authorization refused: identity revoked, released or rotated",
                    )
                    if self._retry_log.should_log("unauthorized", step):
                        log.error(
                            "nats authorization refused for agent %s at %s (Authorization "
                            "Violation): the identity was revoked, released or rotated in the "
                            "Console; retrying with backoff, next in %s",
                            self.agent_id,
                            display_url(url),
                            format_duration(round(step, 3)),
                        )
                except NatsConnectError as e:
                    step = backoff.step(attempt)
                    self._set_state(SessionState.DISCONNECTED, f"nats unreachable: {e.detail}")
                    if self._retry_log.should_log(f"unreachable {e.detail}", step):
                        log.warning(
                            "nats connect to %s failed: %s; retrying with backoff, next in %s",
                            display_url(url),
                            e.detail,
                            format_duration(round(step, 3)),
                        )
                else:
                    attempt = 0
                    self._retry_log.reset()
                    verb = "reconnected" if ever_connected else "connected"
                    if self.trial:
                        verb += " (update trial: no subscriptions)"
                    ever_connected = True
                    deliberate = await self._hold(client, closed, verb)
                    if self._stop.is_set():
                        break
                    if deliberate:
                        # New credentials: connect again right away.
                        continue
                if self.policy.max_attempts is not None and attempt >= self.policy.max_attempts:
                    log.error("nats: giving up after %d attempts", attempt)
                    break
                delay = backoff.delay(attempt)
                attempt += 1
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._stop.wait()
        finally:
            if self._state is not SessionState.RETIRED:
                self._set_state(SessionState.CLOSED, "nats closed: agent stopping")

    def _retire(self, error: IdentityRetiredError) -> None:
        """The key is gone for good: say so once, stay not-ready, stop connecting."""
        self._set_state(SessionState.RETIRED, f"identity retired: {error.message}")
        log.error(
            "nats refused agent %s and the Console confirms its key is no longer the identity's "
            "(%s): %s; not retrying",
            self.agent_id,
            error.reason,
            error.message,
        )

    async def _hold(self, client: Client, closed: asyncio.Event, verb: str) -> bool:
        """Serve one live connection until it closes, a reconnect is asked for, or stop.

        Returns whether the connection was dropped on purpose (a reconnect was asked for).
        """
        url = self.store.current.nats_url
        self.connects += 1
        self._client, self._closed = client, closed
        try:
            if not self.trial:
                await self._subscribe(client)
            else:
                await client.flush(timeout=max(1, round(self.policy.connect_timeout)))
        except (TimeoutError, nats.errors.Error, OSError) as e:
            log.warning("nats subscribe failed on %s: %s", display_url(url), _describe(e))
            self._client, self._closed = None, None
            await self._close(client)
            self._set_state(SessionState.DISCONNECTED, f"nats subscribe failed: {_describe(e)}")
            return False
        log.info(
            "nats %s to %s as agent %s (key %s)",
            verb,
            display_url(url),
            self.agent_id,
            self.store.current.public_key,
        )
        self._set_state(SessionState.CONNECTED)
        for callback in self._on_connected:
            try:
                callback()
            except Exception:
                log.exception("on-connected callback failed")
        renewal = None
        if not self.trial and self.fetch_jwt is not None:
            renewal = asyncio.ensure_future(
                renew_before_expiry(self.store, self.fetch_jwt, self.request_reconnect)
            )
        await _first(closed, self._reconnect, self._stop)
        if renewal is not None:
            renewal.cancel()
        self._client, self._closed, self._key = None, None, None
        if self._stop.is_set():
            self._set_state(SessionState.CLOSED, "nats closed: agent stopping")
            await self._drain(client)
            log.info("nats connection to %s closed: agent stopping", display_url(url))
            return False
        if self._reconnect.is_set() and not closed.is_set():
            self._set_state(SessionState.CONNECTING, "nats reconnecting")
            log.info("nats reconnecting to %s: %s", display_url(url), self._reconnect_reason)
            await self._close(client)
            return True
        reason = _describe(client.last_error)
        self._set_state(SessionState.DISCONNECTED, f"nats disconnected: {reason}")
        log.warning("nats disconnected from %s: %s; reconnecting", display_url(url), reason)
        return False

    async def _subscribe(self, client: Client) -> None:
        async def deliver(msg: Msg) -> None:
            self._on_message(msg.subject, msg.data)

        base = subjects.commands(self.agent_id)
        await client.subscribe(base, cb=deliver)
        await client.subscribe(f"{base}.>", cb=deliver)
        await client.flush(timeout=max(1, round(self.policy.connect_timeout)))

    async def _close(self, client: Client) -> None:
        with contextlib.suppress(Exception):
            await client.close()

    async def _drain(self, client: Client) -> None:
        try:
            await asyncio.wait_for(client.drain(), self.policy.drain_timeout)
        except Exception:
            await self._close(client)

    async def _connect_current(self) -> tuple[Client, asyncio.Event]:
        """Connect with the state's key; if it is refused and a rotation is pending, try the
        pending key and promote it when the server takes it."""
        if not self.trial and self.fetch_jwt is not None:
            await refresh_if_expiring(self.store, self.fetch_jwt)
        state = self.store.current
        self.attempts += 1
        self._reconnect.clear()
        self._reconnect_reason = ""
        try:
            connected = await self._connect(
                state.nats_url, state.seed.get_secret_value(), state.nats_jwt
            )
        except NatsAuthorizationError:
            if self.trial:
                raise
            if state.pending_seed is None:
                return await self._connect_renewed(state.agent_id)
        else:
            self._key = state.public_key
            return connected
        pending = state.pending_seed.get_secret_value()
        pending_jwt = state.pending_jwt
        if pending_jwt is None and self.fetch_jwt is not None:
            try:
                pending_jwt = await self.fetch_jwt(state.agent_id, pending)
            except IdentityRetiredError:
                pending_jwt = None  # the rotation never completed: the pending key is no one's
        log.info(
            "nats refused the current key of agent %s; trying the key of an unfinished "
            "credential rotation (%s)",
            state.agent_id,
            public_key(pending),
        )
        connected = await self._connect(state.nats_url, pending, pending_jwt)
        self.store.update(
            seed=pending, nats_jwt=pending_jwt, pending_seed=None, rotated_at=datetime.now(UTC)
        )
        self._key = public_key(pending)
        log.warning(
            "credential rotation completed: nats accepted the pending key %s; it is now the "
            "agent's key",
            public_key(pending),
        )
        return connected

    async def _connect_renewed(self, agent_id: str) -> tuple[Client, asyncio.Event]:
        """The current key was refused: ask the Console for a fresh JWT for it (an expired or
        re-signed one, after an upgrade) and connect with it. Raises
        :class:`IdentityRetiredError` when the Console says the key is not the identity's."""
        state = self.store.current
        seed = state.seed.get_secret_value()
        jwt = None if self.fetch_jwt is None else await self.fetch_jwt(agent_id, seed)
        if jwt is None or jwt == state.nats_jwt:
            raise NatsAuthorizationError(state.nats_url)
        log.info("nats refused agent %s; connecting with a fresh JWT from the Console", agent_id)
        connected = await self._connect(state.nats_url, seed, jwt)
        self.store.update(nats_jwt=jwt)
        self._key = state.public_key
        return connected

    async def _connect(
        self, url: str, seed: str, jwt: str | None = None
    ) -> tuple[Client, asyncio.Event]:
        closed = asyncio.Event()
        connecting = True
        last_error: list[BaseException] = []

        async def error_cb(error: Exception) -> None:
            if connecting:
                last_error.append(error)
                log.debug("nats error while connecting to %s: %s", display_url(url), error)
            elif isinstance(error, _DISCONNECT_ERRORS):
                log.debug("nats error: %s", _describe(error))
            else:
                log.warning("nats error: %s", _describe(error))

        async def disconnected_cb() -> None:
            if not connecting:
                log.debug("nats transport to %s disconnected", display_url(url))

        async def closed_cb() -> None:
            if not connecting:
                log.debug("nats connection to %s closed", display_url(url))
            closed.set()

        options: dict[str, Any] = {
            "servers": [u.strip() for u in url.split(",") if u.strip()],
            "name": f"proxima-agent {self.agent_id}",
            "nkeys_seed_str": seed,
            # Replies to our requests (result acknowledgements) come to our own inbox only.
            "inbox_prefix": subjects.agent_inbox_prefix(self.agent_id),
            # The seed signs the server's nonce; the JWT (signed by the fleet account) says who
            # this key is and what it may do.
            **({"user_jwt_cb": returning(jwt.encode())} if jwt else {}),
            # Our supervisor reconnects; nats-py gets exactly one go per connect.
            "allow_reconnect": False,
            "max_reconnect_attempts": 1,
            "reconnect_time_wait": 0,
            "connect_timeout": self.policy.connect_timeout,
            "ping_interval": self.policy.ping_interval,
            "max_outstanding_pings": self.policy.max_outstanding_pings,
            "error_cb": error_cb,
            "disconnected_cb": disconnected_cb,
            "closed_cb": closed_cb,
        }
        try:
            client = await nats.connect(**options)
        except (TimeoutError, nats.errors.Error, OSError) as e:
            causes = [*last_error, e]
            if any(_AUTH_VIOLATION in str(c).lower() for c in causes):
                raise NatsAuthorizationError(url) from None
            cause = last_error[-1] if last_error else e
            if isinstance(cause, ConnectionRefusedError):
                raise NatsConnectError(url, "connection refused") from None
            raise NatsConnectError(url, _describe(cause)) from None
        finally:
            connecting = False
        return client, closed
