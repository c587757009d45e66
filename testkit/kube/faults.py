"""Fault injection: make chosen requests fail as the real API server fails.

A `Fault` matches requests by API group, resource, verb, namespace and name (None matches
anything) and answers them with `code` and a real `Status` body (403 names the caller like the
RBAC authorizer does). `times` limits how often it fires. Faults are checked in the order they
were injected; the first that matches answers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from testkit.kube.authorization import forbidden
from testkit.kube.errors import StatusError
from testkit.kube.routing import Target


@dataclass(frozen=True)
class Fault:
    code: int
    resource: str | None = None  # "rollouts", "pods/status"; None: any
    group: str | None = None  # "" is the core group; None: any
    verbs: frozenset[str] | None = None
    namespace: str | None = None
    name: str | None = None
    times: int | None = None  # fire at most this often; None: until removed
    message: str | None = None
    retry_after_seconds: int | None = None  # for 429/503: Status details.retryAfterSeconds

    def matches(self, target: Target) -> bool:
        return (
            (self.resource is None or self.resource in (target.resource, target.plural))
            and (self.group is None or self.group == target.group)
            and (self.verbs is None or target.verb in self.verbs)
            and (self.namespace is None or self.namespace == target.namespace)
            and (self.name is None or self.name == target.name)
        )

    def error(self, target: Target, user: str) -> StatusError:
        return status_for(self.code, target, user, self.message, self.retry_after_seconds)


def status_for(
    code: int,
    target: Target,
    user: str,
    message: str | None = None,
    retry_after_seconds: int | None = None,
) -> StatusError:
    """The Status the API server sends for `code` on this request."""
    details: dict[str, object] = {"kind": target.plural}
    if target.group:
        details["group"] = target.group
    if target.name:
        details["name"] = target.name
    if retry_after_seconds is not None:
        details["retryAfterSeconds"] = retry_after_seconds
    if code == 403 and message is None:
        return forbidden(target, user)
    if code == 404 and message is None:
        if target.name:
            return StatusError(
                404, "NotFound", f'{target.qualified} "{target.name}" not found', details
            )
        return StatusError(
            404, "NotFound", "the server could not find the requested resource", details
        )
    reasons = {
        400: ("BadRequest", "the server rejected our request for an unknown reason"),
        401: ("Unauthorized", "Unauthorized"),
        403: ("Forbidden", "forbidden"),
        404: ("NotFound", "the server could not find the requested resource"),
        409: ("Conflict", "the object has been modified"),
        410: ("Expired", "too old resource version"),
        422: ("Invalid", "the object is invalid"),
        429: ("TooManyRequests", "Too many requests, please try again later."),
        500: ("InternalError", "Internal error occurred: injected fault"),
        503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
        504: ("Timeout", "the server was unable to return a response in the time allotted"),
    }
    reason, default_message = reasons.get(code, ("InternalError", f"injected fault {code}"))
    return StatusError(code, reason, message or default_message, details)


@dataclass
class InjectedFault:
    """A live fault: how often it fired, and how to take it back."""

    fault: Fault
    _book: FaultBook = field(repr=False)
    hits: int = 0

    def remove(self) -> None:
        self._book.remove(self)

    @property
    def exhausted(self) -> bool:
        return self.fault.times is not None and self.hits >= self.fault.times


class FaultBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: list[InjectedFault] = []

    def inject(self, fault: Fault) -> InjectedFault:
        injected = InjectedFault(fault, self)
        with self._lock:
            self._active.append(injected)
        return injected

    def remove(self, injected: InjectedFault) -> None:
        with self._lock:
            if injected in self._active:
                self._active.remove(injected)

    def clear(self) -> None:
        with self._lock:
            self._active.clear()

    @property
    def active(self) -> list[InjectedFault]:
        with self._lock:
            return [f for f in self._active if not f.exhausted]

    def check(self, target: Target, user: str) -> StatusError | None:
        with self._lock:
            for injected in self._active:
                if not injected.exhausted and injected.fault.matches(target):
                    injected.hits += 1
                    return injected.fault.error(target, user)
        return None


def as_verbs(names: Iterable[str] | str | None) -> frozenset[str] | None:
    if names is None:
        return None
    return frozenset([names] if isinstance(names, str) else names)
