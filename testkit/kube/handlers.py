"""The HTTP side of the double: one aiohttp handler that answers as the kube-apiserver does.

Order of checks per resource request, as in the real filter chain: authentication (bearer
token → user), then injected faults (a test asked for them), then RBAC (when enforced), then
whether the resource exists (hidden CRDs do not), then the verb. Every request is recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from aiohttp import web

from testkit.kube import discovery
from testkit.kube.audit import AuditLog, RecordedRequest
from testkit.kube.authorization import RbacPolicy, forbidden, unauthorized
from testkit.kube.errors import StatusError
from testkit.kube.faults import FaultBook
from testkit.kube.resources import CATALOGUE, ResourceType, groups
from testkit.kube.routing import Discovery, DiscoveryPath, Target, parse
from testkit.kube.selectors import field_predicate, label_predicate
from testkit.kube.store import ADDED, ObjectStore, WatchEvent

logger = logging.getLogger(__name__)

ANONYMOUS = "system:anonymous"
_OPEN_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
_NOT_FOUND = "the server could not find the requested resource"
_WATCH_DEFAULT_SECONDS = 1800.0


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


def _status_response(error: StatusError) -> web.Response:
    response = _json(error.to_status(), error.code)
    retry = error.details.get("retryAfterSeconds")
    if retry is not None:
        response.headers["Retry-After"] = str(retry)
    return response


class ApiHandler:
    """Serves the store. Holds the double's live settings by reference (tokens, faults, RBAC
    policies, hidden resources), so changing them in the test takes effect on the next call."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        faults: FaultBook,
        audit: AuditLog,
        tokens: Mapping[str, str],
        rbac: list[RbacPolicy],
        hidden: set[ResourceType],
        require_auth: bool,
        server_version: str,
        address: Callable[[], str],
    ) -> None:
        self.store = store
        self._faults = faults
        self._audit = audit
        self._tokens = tokens
        self._rbac = rbac
        self._hidden = hidden
        self._require_auth = require_auth
        self._server_version = server_version
        self._address = address
        self._watch_queues: set[asyncio.Queue[WatchEvent | None]] = set()

    def visible_resources(self) -> list[ResourceType]:
        return [rt for rt in CATALOGUE if rt not in self._hidden]

    def end_watches(self) -> None:
        """Finish every open watch stream (called in the server's loop before it closes)."""
        for queue in list(self._watch_queues):
            queue.put_nowait(None)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        path = request.path.rstrip("/") or "/"  # the client asks for /version/
        user: str | None = None
        target: Target | None = None
        body: Any = None
        try:
            user = self._authenticate(request)
            parsed = parse(request.method, path, watch_param=query.get("watch") in ("true", "1"))
            if parsed is None:
                response = self._non_resource(path)
            elif isinstance(parsed, Discovery):
                response = self._discovery(parsed)
            else:
                target = parsed
                if request.method in ("POST", "PUT", "PATCH") and request.can_read_body:
                    body = self._decode(
                        await request.read(), request.headers.get("Content-Type", "")
                    )
                self._admit(target, user)
                if target.verb == "watch":
                    self._record(request, query, 200, user, target, body)
                    return await self._watch(request, target, query)
                response = self._serve(target, query, body, request.headers.get("Content-Type", ""))
        except StatusError as error:
            response = _status_response(error)
        except Exception as exc:  # a bug in the double: answer 500 and keep serving
            logger.exception("Kubernetes API double failed on %s %s", request.method, request.path)
            response = _status_response(
                StatusError(500, "InternalError", f"kube double bug: {exc!r}")
            )
        self._record(request, query, response.status, user, target, body)
        return response

    def _record(
        self,
        request: web.Request,
        query: Mapping[str, str],
        status: int,
        user: str | None,
        target: Target | None,
        body: Any,
    ) -> None:
        self._audit.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                query=dict(query),
                status=status,
                user=user,
                verb=target.verb if target else None,
                group=target.group if target else None,
                resource=target.resource if target else None,
                namespace=target.namespace if target else None,
                name=target.name if target else None,
                at=time.time(),
                content_type=request.headers.get("Content-Type"),
                body=body,
                user_agent=request.headers.get("User-Agent"),
            )
        )

    def _authenticate(self, request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() == "bearer" and credential.strip() in self._tokens:
            return self._tokens[credential.strip()]
        if header or (self._require_auth and request.path.rstrip("/") not in _OPEN_PATHS):
            raise unauthorized()
        return ANONYMOUS

    @staticmethod
    def _decode(raw: bytes, content_type: str) -> Any:
        if not raw:
            return None
        if "protobuf" in content_type or "cbor" in content_type:
            # protobuf or CBOR (kubectl may try them first): 415 makes client-go fall back to JSON
            raise StatusError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json, application/yaml ({content_type!r} is not served)",
            )
        try:
            if "yaml" in content_type:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise StatusError(
                400, "BadRequest", f"the body of the request could not be decoded: {exc}"
            ) from None

    def _non_resource(self, path: str) -> web.Response:
        if path == "/version":
            return _json(discovery.server_version(self._server_version))
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/":
            return _json(
                {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}
            )
        raise StatusError(404, "NotFound", _NOT_FOUND)

    def _discovery(self, parsed: Discovery) -> web.Response:
        visible = self.visible_resources()
        if parsed.kind is DiscoveryPath.API:
            return _json(discovery.api_versions(self._address()))
        if parsed.kind is DiscoveryPath.APIS:
            return _json(discovery.api_group_list(visible))
        if parsed.kind is DiscoveryPath.CORE:
            if parsed.version != "v1":
                raise StatusError(404, "NotFound", _NOT_FOUND)
            return _json(discovery.api_resource_list("", "v1", visible))
        versions = groups(visible).get(parsed.group)
        if not versions or (
            parsed.kind is DiscoveryPath.GROUP_VERSION and parsed.version not in versions
        ):
            raise StatusError(404, "NotFound", _NOT_FOUND)
        if parsed.kind is DiscoveryPath.GROUP:
            return _json(discovery.api_group(parsed.group, versions))
        return _json(discovery.api_resource_list(parsed.group, parsed.version, visible))

    def _admit(self, target: Target, user: str) -> None:
        """Faults first (a test asked for them), then RBAC, then does the resource exist."""
        error = self._faults.check(target, user)
        if error is not None:
            raise error
        for policy in list(self._rbac):
            if policy.applies_to(user) and not policy.allows(target):
                raise forbidden(target, user)
        rt = target.rt
        if rt is None or rt in self._hidden:
            raise StatusError(404, "NotFound", _NOT_FOUND)
        if (target.namespace and not rt.namespaced) or (
            rt.namespaced and target.name and not target.namespace
        ):
            raise StatusError(404, "NotFound", _NOT_FOUND)
        if target.subresource is not None and target.subresource not in rt.subresources:
            raise StatusError(404, "NotFound", _NOT_FOUND)

    def _serve(
        self, target: Target, query: Mapping[str, str], body: Any, content_type: str
    ) -> web.Response:
        rt = target.rt
        assert rt is not None
        store = self.store
        if target.verb == "get":
            assert target.name is not None
            return _json(store.get(rt, target.namespace, target.name))
        if target.verb == "list":
            return self._list(rt, target, query)
        if target.verb == "create":
            if target.name is not None or (rt.namespaced and not target.namespace):
                raise StatusError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            self._check_body(rt, body)
            return _json(store.create(rt, body, namespace=target.namespace), 201)
        if target.verb == "update":
            assert target.name is not None
            self._check_body(rt, body)
            return _json(
                store.replace(
                    rt, target.namespace, target.name, body, subresource=target.subresource
                )
            )
        if target.verb == "patch":
            assert target.name is not None
            if body is None:
                raise StatusError(400, "BadRequest", "a patch needs a body")
            return _json(
                store.patch(
                    rt,
                    target.namespace,
                    target.name,
                    body,
                    content_type,
                    subresource=target.subresource,
                )
            )
        if target.verb == "delete":
            assert target.name is not None
            gone = store.delete(rt, target.namespace, target.name)
            if rt.kind in ("Pod", "Namespace"):  # these answer with the object, others a Status
                if rt.kind == "Namespace":
                    gone["status"] = {"phase": "Terminating"}
                return _json(gone)
            details = {"name": target.name, "kind": rt.plural, "uid": gone["metadata"].get("uid")}
            if rt.group:
                details["group"] = rt.group
            return _json(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        if target.verb == "deletecollection":
            items = store.delete_collection(
                rt, namespace=target.namespace, predicates=self._predicates(rt, query)
            )
            return _json(
                {"apiVersion": rt.api_version, "kind": rt.list_kind, "metadata": {}, "items": items}
            )
        raise StatusError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    @staticmethod
    def _check_body(rt: ResourceType, body: Any) -> None:
        if not isinstance(body, Mapping):
            raise StatusError(400, "BadRequest", "the body of the request must be an object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if (api_version and api_version != rt.api_version) or (kind and kind != rt.kind):
            raise StatusError(
                400,
                "BadRequest",
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})",
            )

    @staticmethod
    def _predicates(rt: ResourceType, query: Mapping[str, str]) -> list[Any]:
        return [
            label_predicate(query.get("labelSelector")),
            field_predicate(query.get("fieldSelector"), rt),
        ]

    def _list(self, rt: ResourceType, target: Target, query: Mapping[str, str]) -> web.Response:
        try:
            limit = int(query.get("limit") or 0) or None
        except ValueError:
            raise StatusError(400, "BadRequest", f"invalid limit {query.get('limit')!r}") from None
        page = self.store.list_page(
            rt,
            namespace=target.namespace,
            predicates=self._predicates(rt, query),
            limit=limit,
            continue_token=query.get("continue") or None,
        )
        metadata: dict[str, Any] = {"resourceVersion": page.resource_version}
        if page.continue_token:
            metadata["continue"] = page.continue_token
            metadata["remainingItemCount"] = page.remaining
        return _json(
            {
                "apiVersion": rt.api_version,
                "kind": rt.list_kind,
                "metadata": metadata,
                "items": page.items,
            }
        )

    async def _watch(
        self, request: web.Request, target: Target, query: Mapping[str, str]
    ) -> web.StreamResponse:
        rt = target.rt
        assert rt is not None
        checks = [p for p in self._predicates(rt, query) if p is not None]
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()

        def listener(event: WatchEvent) -> None:  # called in the writer's thread, store locked
            if event.resource is rt:
                loop.call_soon_threadsafe(queue.put_nowait, event)

        since = query.get("resourceVersion") or ""
        error: StatusError | None = None
        backlog: list[WatchEvent] = []
        unsubscribe: Callable[[], None] | None = None
        with self.store.lock:  # backlog and subscription at one instant: no gap, no repeat
            try:
                if since in ("", "0"):
                    page = self.store.list_page(rt, namespace=target.namespace)
                    backlog = [
                        WatchEvent(ADDED, rt, o, int(o["metadata"]["resourceVersion"]))
                        for o in page.items
                    ]
                else:
                    if not since.isdigit():
                        raise StatusError(400, "BadRequest", f"invalid resource version {since!r}")
                    backlog = self.store.history_since(rt, int(since))
                unsubscribe = self.store.subscribe(listener, under_lock=True)
            except StatusError as exc:
                error = exc

        def wanted(event: WatchEvent) -> bool:
            meta = event.object.get("metadata") or {}
            if target.namespace is not None and meta.get("namespace") != target.namespace:
                return False
            return all(check(event.object) for check in checks)

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        self._watch_queues.add(queue)
        try:
            if error is not None:
                await response.write(
                    json.dumps({"type": "ERROR", "object": error.to_status()}).encode() + b"\n"
                )
                return response
            timeout = float(query.get("timeoutSeconds") or _WATCH_DEFAULT_SECONDS)
            deadline = loop.time() + timeout
            for event in backlog:
                if wanted(event):
                    await response.write(self._event_line(event))
            while (remaining := deadline - loop.time()) > 0:
                try:
                    item = await asyncio.wait_for(queue.get(), remaining)
                except TimeoutError:
                    break
                if item is None:  # the server is going down
                    break
                if wanted(item):
                    await response.write(self._event_line(item))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._watch_queues.discard(queue)
            if unsubscribe is not None:
                unsubscribe()
        return response

    @staticmethod
    def _event_line(event: WatchEvent) -> bytes:
        return (
            json.dumps({"type": event.type, "object": event.object}, separators=(",", ":")).encode()
            + b"\n"
        )
