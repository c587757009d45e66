"""Keeping the servers' accounts in step with the database, by pushing account JWTs.

The servers run a ``full`` account resolver (``NatsAuthority.render_config``): they trust the
operator and learn each account from the JWT the Console pushes on ``$SYS.REQ.CLAIMS.UPDATE``
with its system-account user. A key taken away goes into its account's ``revocations``; the push
makes every server refuse the key and cut its live connections. No file, no signal, no polling:
any replica may push, and all render the same JWT for the same database.

A server takes the *last* JWT pushed to it (only its cluster sync compares ``iat``), so two
replicas pushing at once could leave a stale list there: B renders before A's revocation
commits, A pushes, B's push lands last. So a round ends by reading the database's claims
version (``nats_keys.claims_version``): when it is newer than what the round rendered, the
round runs again. The last push to land is then always followed by its pusher's check, and the
servers end on the full revocation list within one round, not at the next full push. The JWT's
``iat`` is that version too, so the cluster's own sync keeps the newest.

Pushes are coalesced: changes that arrive while one runs are sent together by the next, and each
caller of :meth:`ClaimsPusher.apply` returns once a push that includes its change was answered.
:meth:`ClaimsPusher.push_all` forgets what was sent, so the next round pushes every account
again: after any reconnect of the system connection (a server restarted, inside or outside the
Console) and periodically, which repairs a stale JWT another replica pushed late.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Histogram

log = logging.getLogger(__name__)

CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"

PUSH_SECONDS = Histogram(
    "proxima_nats_claims_push_seconds",
    "One round of account JWT pushes, from the first request to the last answer",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

# (claims version, [(account public key, account JWT)]) for every account the servers must know.
LoadClaims = Callable[[], Awaitable[tuple[int, list[tuple[str, str]]]]]
# The claims version the database holds now.
LoadVersion = Callable[[], Awaitable[int]]
RECHECKS = 5  # rounds in a row a newer version may trigger before waiting for the next wake
Request = Callable[[str, bytes], Awaitable[bytes]]


class ClaimsRefusedError(RuntimeError):
    pass


def check_reply(account: str, reply: bytes) -> None:
    """A claims update answers ``{"data": {"code": 200, ...}}`` or ``{"error": {...}}``."""
    try:
        answer = json.loads(reply)
    except ValueError as exc:
        raise ClaimsRefusedError(f"account {account}: unreadable answer {reply[:200]!r}") from exc
    error = answer.get("error")
    if error:
        raise ClaimsRefusedError(f"account {account}: {error.get('description', error)}")
    code = (answer.get("data") or {}).get("code")
    if code not in (None, 200):
        raise ClaimsRefusedError(f"account {account}: answered {answer}")


class ClaimsPusher:
    def __init__(self, *, load: LoadClaims, version: LoadVersion, request: Request) -> None:
        self._load = load
        self._version = version
        self._request = request
        self._sent: dict[str, str] = {}
        self._requested = 0
        self._applied = 0
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self.pushes = 0
        self.rechecks = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="nats-claims")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def push_all(self) -> None:
        """Push every account again on the next round (after a reconnect; periodically)."""
        self._sent.clear()
        self._requested += 1
        self._wake.set()

    async def apply(self, wait_seconds: float = 30.0) -> None:
        """Return once the servers hold every account as the database has it now."""
        self._requested += 1
        wanted = self._requested
        self._wake.set()
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(
                    lambda: self._applied >= wanted or self._failure is not None
                ),
                wait_seconds,
            )
        if self._applied < wanted and self._failure is not None:
            raise RuntimeError(f"nats account push failed: {self._failure}")

    async def push_changed(self) -> int:
        """Push each account whose JWT differs from the last one answered; again while the
        database holds a newer version than the one pushed (another replica's revocation
        committed meanwhile: its own push may have landed before this one)."""
        sent = 0
        for _round in range(RECHECKS):
            with PUSH_SECONDS.time():
                version, claims = await self._load()
                for account, token in claims:
                    if self._sent.get(account) == token:
                        continue
                    reply = await self._request(CLAIMS_UPDATE, token.encode())
                    check_reply(account, reply)
                    self._sent[account] = token
                    sent += 1
            if sent == 0 or await self._version() <= version:
                break
            self.rechecks += 1
        self.pushes += sent
        return sent

    async def _run(self) -> None:
        failing = False
        while True:
            await self._wake.wait()
            self._wake.clear()
            target = self._requested
            try:
                await self.push_changed()
                self._failure = None
                self._applied = target
                if failing:
                    log.info("nats account push works again")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving; the next change or reconnect retries
                if not failing:
                    log.warning("nats account push failed (retrying on the next change): %s", exc)
                failing = True
                self._failure = exc
            async with self._changed:
                self._changed.notify_all()
