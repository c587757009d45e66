"""The request log: every call the double answered, in the API server's terms.

`permissions()` folds the log into the (apiGroup, resource, verb) triples a ClusterRole would
need to grant, so a test can tie a component's calls to the chart's RBAC rules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Permission(NamedTuple):
    group: str  # "" for core
    resource: str  # "pods", "pods/status"
    verb: str

    def as_rule(self) -> dict[str, list[str]]:
        return {"apiGroups": [self.group], "resources": [self.resource], "verbs": [self.verb]}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: Mapping[str, str]
    status: int
    user: str | None
    verb: str | None = None  # None for discovery and non-resource URLs
    group: str | None = None
    resource: str | None = None  # with "/subresource" when there is one
    namespace: str | None = None
    name: str | None = None
    at: float = 0.0  # time.time()
    content_type: str | None = None
    body: Any = field(default=None, repr=False)  # the parsed JSON body of writes
    user_agent: str | None = None

    @property
    def permission(self) -> Permission | None:
        if self.verb is None or self.group is None or self.resource is None:
            return None
        return Permission(self.group, self.resource, self.verb)


class AuditLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[RecordedRequest] = []

    def append(self, entry: RecordedRequest) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def permissions(entries: Iterable[RecordedRequest], *, user: str | None = None) -> set[Permission]:
    return {
        e.permission
        for e in entries
        if e.permission is not None and (user is None or e.user == user)
    }
