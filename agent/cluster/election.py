"""Leader election on a ``coordination.k8s.io`` Lease, the way client-go's leaderelection does it.

Only get, create and update (replace with ``resourceVersion``) are used: the chart's Role grants
nothing else on leases. Every attempt reads the Lease, then

- no Lease: create it holding it (a 409 means another replica created it first);
- held by another, and its record changed less than ``leaseDurationSeconds`` ago *by our own
  clock* (no clock-skew assumptions): stand by;
- otherwise (ours, expired or released): replace it with us as holder. A 409 means another
  replica wrote first: stand by.

The leader renews every ``retry_period``. It stops leading when no renewal succeeded for
``renew_deadline``, before the lease can expire for the others (``lease_duration``): there is
never a moment with two leaders, provided ``renew_deadline < lease_duration``. A standby sees a
renewal up to one (jittered) retry period late and notices the expiry up to one more late, so it
takes over between ``lease_duration - retry_period`` and ``lease_duration + 2 x retry_period x
1.2`` after the leader died; a leader that stops cleanly releases the Lease, and a standby takes
over within one retry period.

Blocking calls run in a worker thread (:func:`asyncio.to_thread`), so heartbeats and NATS never
wait on the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from agent.problems import ProblemLog
from contracts.durations import format_duration

__all__ = [
    "STANDING_BY",
    "ElectionState",
    "LeaseElector",
    "LeaseLock",
    "LeaseStore",
    "LeaseTiming",
]

log = logging.getLogger(__name__)

STANDING_BY = "standing by; another collector holds leadership"


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's knobs; the defaults are client-go's (and the chart's documentation)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "leader election needs lease duration > renew deadline > retry period > 0, got "
                f"{self.lease_duration:g}s / {self.renew_deadline:g}s / {self.retry_period:g}s"
            )

    @property
    def lease_seconds(self) -> int:
        """``leaseDurationSeconds`` is whole seconds in the API: round up, never down."""
        return max(1, math.ceil(self.lease_duration))


class ElectionState(StrEnum):
    STARTING = "starting"
    LEADING = "leading"
    STANDING_BY = "standing by"
    FAILING = "failing"  # cannot read or write the Lease at all


class LeaseStore(Protocol):
    """Blocking get/create/replace of one Lease, as raw JSON. Raises ``ApiException``."""

    name: str
    namespace: str

    def get(self) -> dict[str, Any] | None: ...

    def create(self, lease: dict[str, Any]) -> dict[str, Any]: ...

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]: ...


class LeaseLock:
    """A :class:`LeaseStore` through the official client's ``CoordinationV1Api``."""

    def __init__(
        self, api: client.ApiClient, name: str, namespace: str, *, timeout: float = 5.0
    ) -> None:
        self.name = name
        self.namespace = namespace
        self._api = client.CoordinationV1Api(api)
        self._timeout = timeout

    def _json(self, answer: Any) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(answer.data)
        finally:
            answer.release_conn()
        return data

    def get(self) -> dict[str, Any] | None:
        try:
            answer = self._api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return self._json(answer)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        answer = self._api.create_namespaced_lease(
            self.namespace, _model(lease), _preload_content=False, _request_timeout=self._timeout
        )
        return self._json(answer)

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        answer = self._api.replace_namespaced_lease(
            self.name,
            self.namespace,
            _model(lease),
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        return self._json(answer)


def _model(lease: dict[str, Any]) -> client.V1Lease:
    model = client.V1Lease.from_dict(lease)
    if model is None:
        raise ValueError("not a Lease")
    return model


def _micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class _Attempt:
    """What one try to acquire or renew found."""

    ok: bool
    holder: str | None = None  # who holds it when not us
    problem: str | None = None  # an error, when the Lease could not be read or written


class LeaseElector:
    """Campaigns for the Lease forever; :attr:`is_leader` says whether this process leads now."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        timing: LeaseTiming | None = None,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self.on_change = on_change
        self.state = ElectionState.STARTING
        self.transitions = 0  # times this process became leader
        self._clock = clock
        self._rng = rng
        self._renewed_at = -math.inf  # monotonic time of our last successful write
        self._observed: dict[str, Any] | None = None  # the Lease spec as we last read it
        self._observed_at = -math.inf  # when that spec last changed, by our clock
        self._lease: dict[str, Any] | None = None  # the Lease as we last read or wrote it
        self._holder: str | None = None
        self._problems = ProblemLog(log)

    @property
    def where(self) -> str:
        return f"lease {self.store.namespace}/{self.store.name}"

    @property
    def is_leader(self) -> bool:
        """Leading, and renewed within the renew deadline (checked now, not at the last try)."""
        return (
            self.state is ElectionState.LEADING
            and self._clock() - self._renewed_at < self.timing.renew_deadline
        )

    @property
    def holder(self) -> str | None:
        return self.identity if self.is_leader else self._holder

    # -- one attempt (blocking) -------------------------------------------------------------

    def _spec(self, previous: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
        stamp = _micro_time(now)
        ours = previous is not None and previous.get("holderIdentity") == self.identity
        transitions = int((previous or {}).get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.timing.lease_seconds,
            "acquireTime": (previous or {}).get("acquireTime") if ours else stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions if ours or previous is None else transitions + 1,
        }

    def try_acquire_or_renew(self) -> _Attempt:
        now = datetime.now(UTC)
        lease = self.store.get()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.store.name, "namespace": self.store.namespace},
                "spec": self._spec(None, now),
            }
            try:
                self._lease = self.store.create(body)
            except ApiException as e:
                if e.status == 409:
                    return _Attempt(False, holder=None)
                raise
            self._observe(self._lease)
            return _Attempt(True)
        spec = lease.get("spec") or {}
        self._observe(lease)
        holder = spec.get("holderIdentity") or None
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_seconds)
        if holder and holder != self.identity and self._clock() < self._observed_at + duration:
            self._lease = lease
            return _Attempt(False, holder=holder)
        body = dict(lease)
        body["spec"] = {**spec, **self._spec(spec, now)}
        try:
            self._lease = self.store.replace(body)
        except ApiException as e:
            if e.status == 409:
                return _Attempt(False, holder=None)
            raise
        self._observe(self._lease)
        return _Attempt(True)

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        if spec != self._observed:
            self._observed = spec
            self._observed_at = self._clock()
        self._holder = spec.get("holderIdentity") or None

    # -- the campaign -----------------------------------------------------------------------

    async def _attempt(self) -> _Attempt:
        try:
            return await asyncio.to_thread(self.try_acquire_or_renew)
        except ApiException as e:
            if e.status == 403:
                problem = (
                    f"forbidden to use {self.where} (403): the cluster agent's leader-election "
                    "Role must grant get, create and update on leases (the chart creates it; "
                    "with rbac.create=false grant it yourself)"
                )
            else:
                problem = f"{self.where}: the API server answered {e.status} {e.reason or ''}"
            return _Attempt(False, problem=problem.strip())
        except (urllib3.exceptions.HTTPError, OSError, ConfigException) as e:
            reason = getattr(e, "reason", None)
            detail = str(reason if reason is not None else e) or e.__class__.__name__
            if "Connection refused" in detail:
                detail = "connection refused"
            return _Attempt(
                False, problem=f"cannot reach the API server for {self.where}: {detail}"
            )
        except Exception as e:
            # A Lease we cannot make sense of must not end the campaign: report it, retry.
            log.debug("leader election attempt failed", exc_info=True)
            return _Attempt(False, problem=f"{self.where}: {type(e).__name__}: {e}")

    def _set_leading(self, leading: bool) -> None:
        if leading:
            self.transitions += 1
        if self.on_change is not None:
            try:
                self.on_change(leading)
            except Exception:
                log.exception("leadership change callback failed")

    async def run(self) -> None:
        t = self.timing
        log.info(
            "leader election on %s as %s (lease %s, renew deadline %s, retry every %s)",
            self.where,
            self.identity,
            format_duration(t.lease_duration),
            format_duration(t.renew_deadline),
            format_duration(t.retry_period),
        )
        while True:
            # The renewal counts from before the request, as client-go counts it: the write
            # happened after this, so our deadline never outlasts what the standbys see.
            began = self._clock()
            attempt = await self._attempt()
            now = self._clock()
            if attempt.ok:
                self._problems.recovered("%s readable again", self.where)
                self._renewed_at = began
                if self.state is not ElectionState.LEADING:
                    self.state = ElectionState.LEADING
                    log.info("became the leader on %s: collecting inventory", self.where)
                    self._set_leading(True)
            else:
                if attempt.problem is not None:
                    self._problems.failed(attempt.problem, "%s", attempt.problem)
                else:
                    self._problems.recovered("%s readable again", self.where)
                if self.state is ElectionState.LEADING:
                    lost = attempt.holder is not None or now - self._renewed_at >= t.renew_deadline
                    if lost:
                        why = (
                            f"{attempt.holder} took the lease"
                            if attempt.holder
                            else f"not renewed within {format_duration(t.renew_deadline)}"
                        )
                        log.warning("lost leadership on %s (%s): inventory stops", self.where, why)
                        self.state = ElectionState.STARTING
                        self._set_leading(False)
                if self.state is not ElectionState.LEADING:
                    self._stand_by(attempt)
            delay = t.retry_period
            if self.state is not ElectionState.LEADING:
                # client-go's jitter: standbys do not retry in lockstep.
                delay *= 1 + 0.2 * self._rng()
            await asyncio.sleep(delay)

    def _stand_by(self, attempt: _Attempt) -> None:
        if attempt.holder is not None:
            if self.state is not ElectionState.STANDING_BY:
                self.state = ElectionState.STANDING_BY
                log.info("%s (%s is held by %s)", STANDING_BY, self.where, attempt.holder)
            return
        if attempt.problem is not None:
            self.state = ElectionState.FAILING

    async def release(self) -> None:
        """Give the Lease up (holder cleared, 1 s duration) if we hold it: a standby takes over
        within its retry period instead of waiting for the lease to expire."""
        held = (self._lease or {}).get("spec") or {}
        if self._lease is None or held.get("holderIdentity") != self.identity:
            return
        self.state = ElectionState.STARTING
        lease = dict(self._lease)
        stamp = _micro_time(datetime.now(UTC))
        lease["spec"] = {
            **(lease.get("spec") or {}),
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": stamp,
            "renewTime": stamp,
        }
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.store.replace, lease)
            log.info("released %s", self.where)
