"""The object store: what etcd plus the generic registry do for the double, in memory.

One global, monotonically increasing resourceVersion (as etcd's revision); every write stamps
the object with a new one. A replace or patch carrying a stale `metadata.resourceVersion`
answers 409 Conflict. Lists are ordered by (namespace, name) like etcd keys and are paged with
`limit` and opaque `continue` tokens. A bounded history of change events serves watches.

Thread safety: one re-entrant lock around every read and write, so the server thread, the test
thread and any number of client processes (through the server) see one linear history. Stored
objects are never changed in place: a write stores a new dict. Methods hand out those stored
dicts for speed; callers must not change them (the double's public methods return copies).
"""

from __future__ import annotations

import base64
import binascii
import copy
import itertools
import json
import secrets
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from testkit.kube.errors import StatusError
from testkit.kube.patches import APPLY_PATCH, apply_patch
from testkit.kube.resources import ResourceType
from testkit.kube.selectors import Predicate

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    resource: ResourceType
    object: Mapping[str, Any]
    resource_version: int


@dataclass(frozen=True)
class ListPage:
    items: list[Mapping[str, Any]]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


Listener = Callable[[WatchEvent], None]


def now_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def _describe(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{rt.qualified} "{name}" not found', _describe(rt, name))


def _conflict(rt: ResourceType, name: str) -> StatusError:
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _describe(rt, name),
    )


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class ObjectStore:
    def __init__(self, *, history: int = 100_000) -> None:
        self._lock = threading.RLock()
        self._revision = 0
        self._objects: dict[ResourceType, dict[Key, Obj]] = {}
        self._history: deque[WatchEvent] = deque(maxlen=history)
        self._oldest_watchable = 0  # watches and continue tokens below this revision are gone
        self._locked_listeners: list[Listener] = []
        self._listeners: list[Listener] = []

    # --- bookkeeping ------------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._revision

    def _bump(self) -> int:
        self._revision += 1
        return self._revision

    def subscribe(self, listener: Listener, *, under_lock: bool = False) -> Callable[[], None]:
        """Call `listener` on every change. Under the lock: in order, and must be quick."""
        target = self._locked_listeners if under_lock else self._listeners
        with self._lock:
            target.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in target:
                    target.remove(listener)

        return unsubscribe

    def _record(self, events: list[WatchEvent]) -> None:
        for event in events:
            self._history.append(event)
            for listener in list(self._locked_listeners):
                listener(event)

    def _notify(self, events: list[WatchEvent]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for event in events:
            for listener in listeners:
                listener(event)

    def compact(self) -> None:
        """Forget history as etcd compaction does: older continue tokens and watches get 410."""
        with self._lock:
            # Move past the current revision, so that tokens and watches from before expire
            # while a fresh list (at the new revision) can be watched from.
            self._oldest_watchable = self._bump()
            self._history.clear()

    # --- reads --------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self._lock:
            obj = self._objects.get(rt, {}).get((namespace or "" if rt.namespaced else "", name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.get(rt, namespace, name)
        except StatusError:
            return None

    def count(self, rt: ResourceType | None = None) -> int:
        with self._lock:
            if rt is not None:
                return len(self._objects.get(rt, {}))
            return sum(len(objs) for objs in self._objects.values())

    def list_page(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        predicates: Iterable[Predicate | None] = (),
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListPage:
        checks = [p for p in predicates if p is not None]
        start: Key | None = None
        with self._lock:
            revision = self._revision
            if continue_token:
                token_rv, start = self._decode_continue(continue_token)
                if token_rv < self._oldest_watchable:
                    raise StatusError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
                revision = token_rv
            objects = self._objects.get(rt, {})
            keys = sorted(
                k
                for k in objects
                if (namespace is None or k[0] == namespace) and (start is None or k > start)
            )
            selected: list[Mapping[str, Any]] = []
            last_key: Key | None = None
            remaining = 0
            for key in keys:
                obj = objects[key]
                if not all(check(obj) for check in checks):
                    continue
                if limit is not None and len(selected) >= limit:
                    remaining += 1
                    continue
                selected.append(obj)
                last_key = key
        if remaining and last_key is not None:
            token = self._encode_continue(revision, last_key)
            return ListPage(selected, str(revision), token, remaining)
        return ListPage(selected, str(revision))

    @staticmethod
    def _encode_continue(revision: int, key: Key) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": list(key)})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, Key]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            namespace, name = data["start"]
            return int(data["rv"]), (str(namespace), str(name))
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise StatusError(
                400, "BadRequest", f"continue key is not valid: {token[:40]!r}"
            ) from None

    def history_since(self, rt: ResourceType, revision: int) -> list[WatchEvent]:
        """Events of `rt` after `revision`; 410 Gone when that revision was compacted away."""
        with self._lock:
            oldest = self._history[0].resource_version if self._history else self._revision + 1
            if revision < self._oldest_watchable or (revision + 1 < oldest and self._history):
                raise StatusError(410, "Expired", f"too old resource version: {revision}")
            return [e for e in self._history if e.resource is rt and e.resource_version > revision]

    # --- writes -------------------------------------------------------------------------------

    def _place(
        self, rt: ResourceType, obj: Mapping[str, Any], namespace: str | None
    ) -> tuple[Obj, Key]:
        new = dict(obj)
        meta = _meta(new)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise StatusError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise StatusError(
                    422,
                    "Invalid",
                    f"{rt.kind} is invalid: metadata.name: Required value: name or "
                    "generateName is required",
                )
            meta["name"] = prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
        new["metadata"] = meta
        return new, (meta.get("namespace", "") if rt.namespaced else "", meta["name"])

    def create(
        self,
        rt: ResourceType,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        copy_body: bool = True,
        strict: bool = True,
    ) -> Obj:
        """Create as POST does. `strict` (the API path) also checks the namespace exists."""
        body = copy.deepcopy(dict(obj)) if copy_body else dict(obj)
        if strict and _meta(body).get("resourceVersion"):
            raise StatusError(
                500, "InternalError", "resourceVersion should not be set on objects to be created"
            )
        with self._lock:
            new, key = self._place(rt, body, namespace)
            bucket = self._objects.setdefault(rt, {})
            if key in bucket:
                raise StatusError(
                    409,
                    "AlreadyExists",
                    f'{rt.qualified} "{key[1]}" already exists',
                    _describe(rt, key[1]),
                )
            if strict and rt.namespaced and ("", key[0]) not in self._namespaces():
                raise StatusError(
                    404,
                    "NotFound",
                    f'namespaces "{key[0]}" not found',
                    {"name": key[0], "kind": "namespaces"},
                )
            event = self._store_new(rt, key, new)
        self._notify([event])
        return new

    def _namespaces(self) -> dict[Key, Obj]:
        return next(
            (
                objs
                for rt, objs in self._objects.items()
                if rt.plural == "namespaces" and not rt.group
            ),
            {},
        )

    def _store_new(self, rt: ResourceType, key: Key, new: Obj) -> WatchEvent:
        meta = new["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_timestamp())
        meta.setdefault("generation", 1)
        if rt.kind == "Namespace":
            new.setdefault("status", {"phase": "Active"})
        revision = self._bump()
        meta["resourceVersion"] = str(revision)
        self._objects.setdefault(rt, {})[key] = new
        event = WatchEvent(ADDED, rt, new, revision)
        self._record([event])
        return event

    def put_many(self, rt_objects: Iterable[tuple[ResourceType, Mapping[str, Any]]]) -> int:
        """Preload: create or overwrite each object unconditionally (no checks, no copies)."""
        events: list[WatchEvent] = []
        with self._lock:
            for rt, obj in rt_objects:
                new, key = self._place(rt, obj, None)
                new["metadata"].pop("resourceVersion", None)
                old = self._objects.get(rt, {}).get(key)
                if old is None:
                    events.append(self._store_new(rt, key, new))
                else:
                    events.append(self._write(rt, key, old, new))
        self._notify(events)
        return len(events)

    def _prepare(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        """Carry the fields a client cannot change over from `old`; count spec changes."""
        meta = new.setdefault("metadata", {})
        old_meta = old["metadata"]
        for field in ("uid", "creationTimestamp", "name"):
            meta[field] = old_meta.get(field)
        if rt.namespaced:
            meta["namespace"] = old_meta.get("namespace")
        generation = int(old_meta.get("generation") or 1)
        if _spec_part(new) != _spec_part(old):
            generation += 1
        meta["generation"] = generation
        meta["resourceVersion"] = old_meta.get("resourceVersion")

    def _write(self, rt: ResourceType, key: Key, old: Obj, new: Obj) -> WatchEvent:
        self._prepare(rt, old, new)
        revision = self._bump()
        new["metadata"]["resourceVersion"] = str(revision)
        self._objects[rt][key] = new
        event = WatchEvent(MODIFIED, rt, new, revision)
        self._record([event])
        return event

    def _update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        build: Callable[[Obj], Obj],
        *,
        subresource: str | None,
        create_missing: Callable[[], Obj] | None = None,
    ) -> Obj:
        with self._lock:
            key = (namespace or "" if rt.namespaced else "", name)
            old = self._objects.get(rt, {}).get(key)
            if old is None and create_missing is None:
                raise not_found(rt, name)
            if old is not None:
                new = self._updated(rt, old, build(old), name, subresource)
                if new is old:
                    return old
                event = self._write(rt, key, old, new)
        if old is None:
            assert create_missing is not None
            return self.create(rt, create_missing(), namespace=namespace, copy_body=False)
        self._notify([event])
        return new

    def _updated(
        self, rt: ResourceType, old: Obj, candidate: Obj, name: str, subresource: str | None
    ) -> Obj:
        """The object `candidate` makes of `old`, or `old` itself when nothing changes."""
        meta = _meta(candidate)
        if meta.get("name") not in (None, "", name):
            raise StatusError(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the name on "
                f"the URL ({name})",
            )
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old["metadata"].get("resourceVersion"):
            raise _conflict(rt, name)
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in candidate:
                new["status"] = candidate["status"]
            else:
                new.pop("status", None)
        elif subresource is not None:
            raise StatusError(404, "NotFound", "the server could not find the requested resource")
        else:
            new = dict(candidate)
            new["metadata"] = meta
            new["apiVersion"] = rt.api_version
            new["kind"] = rt.kind
            if rt.has_status:  # the main resource ignores status, as the real registry does
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
        self._prepare(rt, old, new)
        if new == old:  # a no-op write keeps its resourceVersion, as on the real server
            return old
        return new

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        obj: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> Obj:
        body = copy.deepcopy(dict(obj))
        return self._update(rt, namespace, name, lambda _old: body, subresource=subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str,
        *,
        subresource: str | None = None,
    ) -> Obj:
        def build(old: Obj) -> Obj:
            patched = apply_patch(old, patch, content_type)
            # An rv in the patch is a precondition; without one the patch applies to the latest.
            patch_meta = patch.get("metadata") if isinstance(patch, Mapping) else None
            if not (isinstance(patch_meta, Mapping) and patch_meta.get("resourceVersion")):
                patched.setdefault("metadata", {})["resourceVersion"] = old["metadata"].get(
                    "resourceVersion"
                )
            return patched

        create_missing = None
        if content_type.split(";")[0].strip() == APPLY_PATCH:  # server-side apply creates

            def create_missing() -> Obj:
                body = copy.deepcopy(dict(patch))
                body.setdefault("metadata", {})["name"] = name
                return body

        return self._update(
            rt, namespace, name, build, subresource=subresource, create_missing=create_missing
        )

    def delete(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self._lock:
            key = (namespace or "" if rt.namespaced else "", name)
            old = self._objects.get(rt, {}).get(key)
            if old is None:
                raise not_found(rt, name)
            events = self._remove(rt, key)
            if rt.kind == "Namespace":  # a namespace takes its contents with it
                for other, objects in self._objects.items():
                    if other.namespaced:
                        for k in [k for k in objects if k[0] == name]:
                            events.extend(self._remove(other, k))
            gone = events[0].object
        self._notify(events)
        return dict(gone)

    def _remove(self, rt: ResourceType, key: Key) -> list[WatchEvent]:
        old = self._objects[rt].pop(key)
        revision = self._bump()
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(revision)}}
        event = WatchEvent(DELETED, rt, gone, revision)
        self._record([event])
        return [event]

    def delete_collection(
        self, rt: ResourceType, *, namespace: str | None, predicates: Iterable[Predicate | None]
    ) -> list[Mapping[str, Any]]:
        page = self.list_page(rt, namespace=namespace, predicates=predicates)
        deleted: list[Mapping[str, Any]] = []
        for item in page.items:
            try:
                deleted.append(
                    self.delete(rt, item["metadata"].get("namespace"), item["metadata"]["name"])
                )
            except StatusError:  # deleted by someone else meanwhile
                continue
        return deleted

    def clear(self) -> None:
        with self._lock:
            self._objects.clear()
            self._history.clear()

    def all_objects(self) -> Iterable[tuple[ResourceType, Mapping[str, Any]]]:
        with self._lock:
            return list(
                itertools.chain.from_iterable(
                    ((rt, obj) for obj in objects.values()) for rt, objects in self._objects.items()
                )
            )
