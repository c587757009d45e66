"""`KubeApiDouble`: the API server double, an aiohttp app on 127.0.0.1 in its own thread.

The official client (in this process or in subprocesses) talks to it over real HTTP. The test
keeps a handle to preload objects, inject faults, take the server down and up again on the same
port, and read which calls were made. See docs/testing-kubernetes.md.
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import yaml
from aiohttp import web

from testkit.kube import kubeconfig
from testkit.kube.audit import AuditLog, Permission, RecordedRequest, permissions
from testkit.kube.authorization import (
    DEFAULT_TOKEN,
    DEFAULT_USER,
    RbacPolicy,
)
from testkit.kube.faults import Fault, FaultBook, InjectedFault, as_verbs
from testkit.kube.handlers import ApiHandler
from testkit.kube.patches import MERGE_PATCH
from testkit.kube.resources import (
    ROLLOUTS,
    ResourceType,
    by_kind,
    find,
)
from testkit.kube.selectors import label_predicate
from testkit.kube.store import ObjectStore, WatchEvent
from testkit.kube.tls import ServingCertificate, make_serving_certificate

if TYPE_CHECKING:
    import kubernetes.client

logger = logging.getLogger(__name__)

_BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class RolloutsMode(StrEnum):
    """How argoproj.io rollouts look: installed, CRD absent (404), or RBAC-forbidden (403)."""

    PRESENT = "present"
    ABSENT = "absent"
    FORBIDDEN = "forbidden"


class ServerState(StrEnum):
    STOPPED = "stopped"
    UP = "up"
    DOWN = "down"  # the thread runs, the port is closed: connections are refused


@dataclass(frozen=True)
class AppliedObject:
    kind: str
    namespace: str | None
    name: str
    action: str  # created | configured | unchanged


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the Kubernetes API double binds loopback addresses only, not {host!r}")


class KubeApiDouble:
    """A Kubernetes API server double. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        token: str = DEFAULT_TOKEN,
        user: str = DEFAULT_USER,
        require_auth: bool = True,
        bootstrap: bool = True,
        server_version: str = "v1.33.1",
        rollouts: RolloutsMode = RolloutsMode.PRESENT,
        tls: bool = False,
    ) -> None:
        _check_loopback(host)
        self._host = host
        self._tls = tls
        self._certificate: ServingCertificate | None = None
        self._port = port
        self.token = token
        self.user = user
        self._tokens: dict[str, str] = {token: user}
        self.store = ObjectStore()
        self._faults = FaultBook()
        self._audit = AuditLog()
        self._rbac: list[RbacPolicy] = []
        self._hidden: set[ResourceType] = set()
        self._rollouts_fault: InjectedFault | None = None
        self._state = ServerState.STOPPED
        self._state_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._handler = ApiHandler(
            store=self.store,
            faults=self._faults,
            audit=self._audit,
            tokens=self._tokens,
            rbac=self._rbac,
            hidden=self._hidden,
            require_auth=require_auth,
            server_version=server_version,
            address=lambda: f"{self._host}:{self.port}",
        )
        if bootstrap:
            self.put(
                *(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                    for n in _BOOTSTRAP_NAMESPACES
                )
            )
        self.set_rollouts(rollouts)

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the Kubernetes API double has not been started")
        return self._port

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self._host}:{self.port}"

    @property
    def ca_path(self) -> Path | None:
        """The CA that signed the serving certificate (TLS only, once started)."""
        return self._certificate.ca_path if self._certificate else None

    def start(self) -> Self:
        with self._state_lock:
            if self._state is not ServerState.STOPPED:
                raise RuntimeError(f"the Kubernetes API double is already {self._state}")
            if self._tls and self._certificate is None:
                directory = Path(tempfile.mkdtemp(prefix="kube-api-double-"))
                self._certificate = make_serving_certificate(directory)
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=self._run_loop, args=(loop,), name="kube-api-double", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
            try:
                self._call(self._bind())
            except BaseException:
                self._shutdown_loop()
                raise
            self._state = ServerState.UP
        logger.info("Kubernetes API double listening on %s", self.url)
        return self

    def stop(self) -> None:
        with self._state_lock:
            if self._state is ServerState.STOPPED:
                return
            try:
                self._call(self._unbind())
            finally:
                self._shutdown_loop()
                self._state = ServerState.STOPPED
                if self._certificate is not None:
                    shutil.rmtree(self._certificate.ca_path.parent, ignore_errors=True)
                    self._certificate = None

    def down(self) -> None:
        """Close the port and every open connection: clients get 'connection refused'."""
        with self._state_lock:
            if self._state is not ServerState.UP:
                raise RuntimeError(f"cannot take the API double down while {self._state}")
            self._call(self._unbind())
            self._state = ServerState.DOWN

    def up(self) -> None:
        """Listen again on the same port, with every object kept."""
        with self._state_lock:
            if self._state is not ServerState.DOWN:
                raise RuntimeError(f"cannot bring the API double up while {self._state}")
            self._call(self._bind())
            self._state = ServerState.UP

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def _call(self, coro: Any, timeout: float = 15.0) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _shutdown_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None

    async def _bind(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handler.handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        context = self._certificate.server_context() if self._certificate else None
        site = web.TCPSite(
            runner, self._host, self._port or 0, reuse_address=True, ssl_context=context
        )
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = int(runner.addresses[0][1])
        self._runner = runner

    async def _unbind(self) -> None:
        self._handler.end_watches()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # --- pointing clients at it ---------------------------------------------------------------

    def add_token(self, token: str, user: str) -> None:
        """Accept another bearer token, authenticated as `user` (e.g. a second service account)."""
        self._tokens[token] = user

    def configuration(self, *, token: str | None = None) -> kubernetes.client.Configuration:
        return kubeconfig.configuration(self.url, token or self.token, ca_path=self.ca_path)

    def api_client(self, *, token: str | None = None) -> kubernetes.client.ApiClient:
        """A client of its own (no global state); close it when done."""
        import kubernetes.client

        return kubernetes.client.ApiClient(self.configuration(token=token))

    def write_kubeconfig(
        self, path: Path, *, token: str | None = None, namespace: str | None = None
    ) -> Path:
        return kubeconfig.write(
            path, self.url, token or self.token, namespace=namespace, ca_path=self.ca_path
        )

    def write_service_account(
        self, directory: Path, *, namespace: str = "proxima-system", token: str | None = None
    ) -> Path:
        """Write token, namespace and (TLS) ca.crt as a pod's service-account mount holds them."""
        return kubeconfig.write_service_account(
            directory, token or self.token, namespace=namespace, ca_path=self.ca_path
        )

    def in_cluster_env(self) -> dict[str, str]:
        """KUBERNETES_SERVICE_HOST/PORT as a pod sees them; in-cluster config needs `tls=True`."""
        if not self._tls:
            raise RuntimeError(
                "in-cluster config speaks https only: start the double with tls=True"
            )
        return {"KUBERNETES_SERVICE_HOST": self._host, "KUBERNETES_SERVICE_PORT": str(self.port)}

    def subprocess_env(self, kubeconfig_path: Path) -> dict[str, str]:
        """Environment for a child process: KUBECONFIG plus the raw URL and token."""
        env = {
            "KUBECONFIG": str(kubeconfig_path),
            "KUBE_DOUBLE_URL": self.url,
            "KUBE_DOUBLE_TOKEN": self.token,
        }
        if self.ca_path is not None:
            env["KUBE_DOUBLE_CA"] = str(self.ca_path)
        return env

    # --- state, from the test's side (no auth, no faults, not logged) -------------------------

    def put(self, *objects: Mapping[str, Any]) -> None:
        """Create or overwrite objects as they are (status, timestamps and all)."""
        self.put_many(objects)

    def put_many(self, objects: Iterable[Mapping[str, Any]], *, copy_objects: bool = True) -> int:
        pairs = (
            (
                by_kind(obj["apiVersion"], obj["kind"]),
                copy.deepcopy(dict(obj)) if copy_objects else obj,
            )
            for obj in objects
        )
        return self.store.put_many(pairs)

    def get(
        self, resource: str | ResourceType, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        obj = self.store.find(find(resource), namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def list_objects(
        self,
        resource: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        page = self.store.list_page(
            find(resource), namespace=namespace, predicates=[label_predicate(label_selector)]
        )
        return [copy.deepcopy(dict(o)) for o in page.items]

    def count(self, resource: str | ResourceType | None = None) -> int:
        return self.store.count(find(resource) if resource is not None else None)

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        obj = self.store.patch(
            find(resource), namespace, name, patch, content_type, subresource=subresource
        )
        return copy.deepcopy(obj)

    def set_status(
        self,
        resource: str | ResourceType,
        name: str,
        status: Mapping[str, Any],
        *,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Merge `status` into the object's status, as a controller would."""
        return self.patch(
            resource, name, {"status": dict(status)}, namespace=namespace, subresource="status"
        )

    def delete(self, resource: str | ResourceType, name: str, namespace: str | None = None) -> None:
        self.store.delete(find(resource), namespace, name)

    def apply_manifests(
        self,
        manifests: str | Iterable[Mapping[str, Any] | None],
        *,
        namespace: str = "default",
        create_namespace: bool = True,
    ) -> list[AppliedObject]:
        """Apply rendered manifests (e.g. `helm template` output) like a plain `kubectl apply`:
        create what is missing, replace what exists (its status kept), report each outcome."""
        docs = yaml.safe_load_all(manifests) if isinstance(manifests, str) else manifests
        flat: list[Mapping[str, Any]] = []
        for doc in docs:
            if not doc:
                continue
            if str(doc.get("kind", "")).endswith("List") and "items" in doc:
                flat.extend(i for i in doc["items"] if i)
            else:
                flat.append(doc)
        results: list[AppliedObject] = []
        for doc in flat:
            rt = by_kind(doc["apiVersion"], doc["kind"])
            meta = doc.get("metadata") or {}
            ns = (meta.get("namespace") or namespace) if rt.namespaced else None
            if ns and create_namespace and self.store.find(find("namespaces"), None, ns) is None:
                self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            existing = self.store.find(rt, ns, meta["name"])
            if existing is None:
                stored = self.store.create(rt, doc, namespace=ns)
                action = "created"
            else:
                body = copy.deepcopy(dict(doc))
                body.setdefault("metadata", {}).pop("resourceVersion", None)
                stored = self.store.replace(rt, ns, meta["name"], body)
                action = "unchanged" if stored is existing else "configured"
            results.append(AppliedObject(rt.kind, ns, stored["metadata"]["name"], action))
        return results

    def on_change(self, callback: Callable[[WatchEvent], None]) -> Callable[[], None]:
        """Call `callback(event)` after every write, in the writer's thread (the server thread
        for API writes): keep it quick. Returns the function that unsubscribes it."""
        return self.store.subscribe(callback)

    # --- resource visibility (CRDs) -----------------------------------------------------------

    def hide(self, resource: str | ResourceType) -> None:
        """Make a resource look uninstalled: gone from discovery, 404 on every call."""
        self._hidden.add(find(resource))

    def unhide(self, resource: str | ResourceType) -> None:
        self._hidden.discard(find(resource))

    def visible_resources(self) -> list[ResourceType]:
        return self._handler.visible_resources()

    def set_rollouts(self, mode: RolloutsMode | str) -> None:
        mode = RolloutsMode(mode)
        if self._rollouts_fault is not None:
            self._rollouts_fault.remove()
            self._rollouts_fault = None
        self.unhide(ROLLOUTS)
        if mode is RolloutsMode.ABSENT:
            self.hide(ROLLOUTS)
        elif mode is RolloutsMode.FORBIDDEN:
            self._rollouts_fault = self.forbid("rollouts", group="argoproj.io")

    # --- faults and RBAC ----------------------------------------------------------------------

    def inject(self, fault: Fault) -> InjectedFault:
        return self._faults.inject(fault)

    def forbid(
        self,
        resource: str | None = None,
        *,
        group: str | None = None,
        verbs: Iterable[str] | str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = None,
    ) -> InjectedFault:
        """403 with the RBAC authorizer's message for matching calls."""
        return self.inject(Fault(403, resource, group, as_verbs(verbs), namespace, name, times))

    def fail(
        self,
        resource: str | None = None,
        *,
        code: int = 500,
        group: str | None = None,
        verbs: Iterable[str] | str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = None,
        message: str | None = None,
    ) -> InjectedFault:
        """Answer matching calls with `code` (404, 409, 410, 429, 500, 503, …) and its Status."""
        return self.inject(
            Fault(code, resource, group, as_verbs(verbs), namespace, name, times, message)
        )

    def clear_faults(self) -> None:
        self._faults.clear()
        self._rollouts_fault = None

    @property
    def faults(self) -> list[InjectedFault]:
        return self._faults.active

    def enforce_rbac(self, rules: Iterable[Mapping[str, Any]], *, user: str | None = None) -> None:
        """From now on, allow `user` (None: every user) only what these ClusterRole rules grant."""
        self._rbac.append(RbacPolicy.from_rules(rules, user=user))

    def clear_rbac(self) -> None:
        self._rbac.clear()

    # --- the request log ----------------------------------------------------------------------

    def requests(
        self,
        *,
        verb: str | None = None,
        resource: str | None = None,
        user: str | None = None,
    ) -> list[RecordedRequest]:
        return [
            e
            for e in self._audit.entries()
            if (verb is None or e.verb == verb)
            and (resource is None or e.resource == resource)
            and (user is None or e.user == user)
        ]

    def permissions(self, *, user: str | None = None) -> set[Permission]:
        """The (apiGroup, resource, verb) triples of every resource call made (even refused)."""
        return permissions(self._audit.entries(), user=user)

    def clear_requests(self) -> None:
        self._audit.clear()
