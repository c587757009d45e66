"""A real Kubernetes control plane on 127.0.0.1 for the ``tests/cluster`` lane.

``KubeCluster(workdir, binaries, nodes=3).start()`` runs, each on free loopback ports:

- etcd (one member, ``--unsafe-no-fsync``: a test cluster, thrown away after the run);
- kube-apiserver with the Node and RBAC authorizers, its default admission plugins (Pod Security
  admission among them) plus NodeRestriction, a ServiceAccount token issuer with a key pair
  generated for the run, and serving/client certificates from a CA generated for the run;
- kube-controller-manager (ServiceAccount, token, DaemonSet, StatefulSet, garbage-collector,
  namespace … controllers, each with its own ServiceAccount credentials);
- kube-scheduler;
- kwok, which plays the kubelet of ``nodes`` simulated Nodes: its "fast" stages make their
  pods Running and Ready at once, and it renews their node Leases;
- a default StorageClass ``standard`` with a pool of ``volumes`` static 1Gi PersistentVolumes
  (no provisioner runs here), so claims bind as on a cluster with a default StorageClass.

``admin_kubeconfig`` is a kubeconfig for ``system:masters``; ``stop()`` ends every process
(SIGTERM, then SIGKILL) and removes the work directory. The binaries come from
``scripts/tools.py control-plane`` (built from source through the Go module proxy, cached).
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from testkit.net import free_port

if TYPE_CHECKING:  # cryptography is imported only when a cluster starts
    from testkit.cluster_pki import ClusterPki, Pair

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# A pod carrying this annotation is left alone by kwok's "pod-ready" stage: its status (Running,
# Ready from its probes) is reported by testkit.kubelet.KubeletDouble, as a kubelet would.
PROBED_ANNOTATION = "proxima.test/kubelet-double"
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
CLIENTS = {
    "admin": ("kubernetes-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok-controller", "system:masters"),
}


class ClusterStartError(RuntimeError):
    """The control plane did not come up; the message says which part and quotes its log."""


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str]) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 10.0) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass
class KubeCluster:
    """See the module docstring. ``binaries`` maps kube-apiserver, kube-controller-manager,
    kube-scheduler, etcd, kwok and kwok-stages (the stage file) to paths."""

    workdir: Path
    binaries: Mapping[str, Path]
    nodes: int = 3
    volumes: int = 40
    keep_workdir: bool = False
    pod_security: str | None = None
    """Pod Security admission's cluster-wide default level (enforce, warn, audit), as a
    hardened cluster sets it; None: Kubernetes' default, privileged."""
    components: list[Component] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    api_port: int = 0
    pki: ClusterPki | None = None

    # -- paths -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def node_names(self) -> list[str]:
        return [f"kwok-node-{i}" for i in range(self.nodes)]

    def env(self) -> dict[str, str]:
        """What a subprocess (kubectl, helm, an agent) needs to reach the cluster as admin."""
        return {"KUBECONFIG": str(self.admin_kubeconfig)}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> KubeCluster:
        started = time.monotonic()
        try:
            self._start(started, timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - started
        return self

    def _start(self, started: float, timeout: float) -> None:
        missing = [n for n in _BINARIES if not Path(self.binaries.get(n, "")).is_file()]
        if missing:
            raise ClusterStartError(f"missing control-plane binaries: {', '.join(missing)}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        from testkit.cluster_pki import generate

        self.pki = generate(self.workdir / "pki", dict(CLIENTS))
        self.api_port = free_port()
        for name in CLIENTS:
            self.write_kubeconfig(self.workdir / f"{name}.kubeconfig", self.pki.clients[name])
        etcd_url = self._launch_etcd()
        self._wait(lambda: _http_ok(f"{etcd_url}/health"), "etcd /health", timeout, started)
        self.timings["etcd"] = time.monotonic() - started
        self._launch("kube-apiserver", self._apiserver_args(etcd_url))
        self._wait(self._api_ready, "kube-apiserver /readyz", timeout, started)
        self.timings["kube-apiserver"] = time.monotonic() - started
        self._launch("kube-controller-manager", self._controller_manager_args())
        self._launch("kube-scheduler", self._scheduler_args())
        self._launch("kwok", self._kwok_args())
        self._create_nodes()
        self._create_storage()
        self._wait(self._default_service_account, "the default ServiceAccount", timeout, started)
        self._wait(self._nodes_ready, f"{self.nodes} Ready kwok nodes", timeout, started)

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KubeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- components ------------------------------------------------------------------------

    def _launch(self, name: str, args: list[str]) -> Component:
        binary = str(self.binaries[name])
        component = Component(name, [binary, *args], self.workdir / "logs" / f"{name}.log")
        component.start(_clean_env())
        self.components.append(component)
        return component

    def _launch_etcd(self) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._launch(
            "etcd",
            [
                "--name=test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        return client_url

    def _apiserver_args(self, etcd_url: str) -> list[str]:
        pki = self._pki()
        return [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving.cert}",
            f"--tls-private-key-file={pki.serving.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
            *self._admission_config(),
        ]

    def _admission_config(self) -> list[str]:
        if self.pod_security is None:
            return []
        modes = {m: self.pod_security for m in ("enforce", "warn", "audit")}
        versions = {f"{m}-version": "latest" for m in modes}
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {
                    "name": "PodSecurity",
                    "configuration": {
                        "apiVersion": "pod-security.admission.config.k8s.io/v1",
                        "kind": "PodSecurityConfiguration",
                        "defaults": {**modes, **versions},
                        "exemptions": {"namespaces": ["kube-system"]},
                    },
                }
            ],
        }
        path = self.workdir / "admission.yaml"
        path.write_text(yaml.safe_dump(config))
        return [f"--admission-control-config-file={path}"]

    def _controller_manager_args(self) -> list[str]:
        pki = self._pki()
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*",
            "--v=1",
        ]

    def _scheduler_args(self) -> list[str]:
        kubeconfig = self.workdir / "scheduler.kubeconfig"
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--v=1",
        ]

    def _kwok_args(self) -> list[str]:
        return [
            f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
            f"--config={self._stages()}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{free_port()}",
            "--node-ip=127.0.0.2",
        ]

    def _stages(self) -> Path:
        """kwok's stage file, its "pod-ready" stage skipping pods with :data:`PROBED_ANNOTATION`."""
        stages = list(yaml.safe_load_all(Path(self.binaries["kwok-stages"]).read_text()))
        for stage in stages:
            if stage and stage["metadata"]["name"] == "pod-ready":
                stage["spec"]["selector"]["matchExpressions"].append(
                    {
                        "key": f'.metadata.annotations["{PROBED_ANNOTATION}"]',
                        "operator": "DoesNotExist",
                    }
                )
        path = self.workdir / "kwok-stages.yaml"
        path.write_text(yaml.safe_dump_all(stages, sort_keys=False))
        return path

    def _create_nodes(self) -> None:
        import kubernetes.client as k8s

        with self.api_client() as client:
            core = k8s.CoreV1Api(client)
            for name in self.node_names:
                core.create_node(_kwok_node(name))  # type: ignore[arg-type]

    def _create_storage(self) -> None:
        import kubernetes.client as k8s

        with self.api_client() as client:
            k8s.StorageV1Api(client).create_storage_class(_STORAGE_CLASS)  # type: ignore[arg-type]
            core = k8s.CoreV1Api(client)
            for index in range(self.volumes):
                core.create_persistent_volume(_volume(f"pv-{index:03d}"))  # type: ignore[arg-type]

    def add_nodes(
        self,
        names: list[str],
        labels: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        timeout: float = 60,
    ) -> None:
        """More kwok Nodes (``labels`` added to the usual ones, ``taints`` on them), waited on
        until Ready. They are not counted in ``nodes``: a test that adds them removes them
        (:meth:`delete_nodes`)."""
        import kubernetes.client as k8s

        with self.api_client() as client:
            core = k8s.CoreV1Api(client)
            for name in names:
                node = _kwok_node(name)
                node["metadata"]["labels"].update(labels or {})
                if taints:
                    node["spec"] = {"taints": taints}
                core.create_node(node)  # type: ignore[arg-type]
        wanted = set(names)
        self._wait(
            lambda: wanted <= self._ready_node_names(),
            f"{len(names)} more Ready kwok nodes",
            timeout,
            time.monotonic(),
        )

    def delete_nodes(self, names: list[str]) -> None:
        """Delete Nodes (their pods are then garbage-collected by the controller-manager)."""
        import kubernetes.client as k8s
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as client:
            core = k8s.CoreV1Api(client)
            for name in names:
                try:
                    core.delete_node(name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise

    # -- readiness -------------------------------------------------------------------------

    def _pki(self) -> ClusterPki:
        assert self.pki is not None, "start() generates the PKI"
        return self.pki

    def _wait(self, condition: Any, what: str, timeout: float, started: float) -> None:
        while True:
            for component in self.components:
                if not component.running():
                    raise ClusterStartError(
                        f"{component.name} exited while waiting for {what}:\n{component.tail()}"
                    )
            try:
                if condition():
                    return
            except Exception:  # not ready yet: poll again
                pass
            if time.monotonic() - started > timeout:
                logs = "\n".join(f"--- {c.name}:\n{c.tail(8)}" for c in self.components)
                raise ClusterStartError(
                    f"timed out after {timeout:.0f}s waiting for {what}\n{logs}"
                )
            time.sleep(0.2)

    def ssl_context(self) -> ssl.SSLContext:
        pki = self._pki()
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        admin = pki.clients["admin"]
        context.load_cert_chain(str(admin.cert), str(admin.key))
        return context

    def _api_ready(self) -> bool:
        request = urllib.request.Request(f"{self.url}/readyz")
        with urllib.request.urlopen(request, context=self.ssl_context(), timeout=5) as answer:
            return bool(answer.status == 200)

    def _default_service_account(self) -> bool:
        import kubernetes.client as k8s

        with self.api_client() as client:
            k8s.CoreV1Api(client).read_namespaced_service_account("default", "default")
        return True

    def _ready_node_names(self) -> set[str]:
        import kubernetes.client as k8s

        with self.api_client() as client:
            nodes: list[Any] = k8s.CoreV1Api(client).list_node().items
        return {
            str(n.metadata.name)
            for n in nodes
            if n.status
            and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        }

    def _nodes_ready(self) -> bool:
        return len(self._ready_node_names()) >= self.nodes

    # -- clients ---------------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, client: Pair | None = None, token: str = "") -> Path:
        """A kubeconfig for ``client`` (a certificate pair) or a bearer ``token``."""
        user: dict[str, str] = {"token": token}
        if client is not None:
            user = {"client-certificate": str(client.cert), "client-key": str(client.key)}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self._pki().ca.cert),
                    },
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def api_client(self, kubeconfig: Path | None = None, pool: int | None = None) -> Any:
        """An official-client ApiClient (its own Configuration), admin unless told otherwise;
        ``pool``: connections kept per host, for a client many threads share."""
        import kubernetes.client
        import kubernetes.config

        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig or self.admin_kubeconfig),
            client_configuration=configuration,
            persist_config=False,
        )
        if pool is not None:
            configuration.connection_pool_maxsize = pool
        return kubernetes.client.ApiClient(configuration)


_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kwok-stages",
)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies, so a killed
    test run leaves no control plane behind (Linux ``PR_SET_PDEATHSIG``)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _clean_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "TMPDIR", "LANG")
    return {k: v for k, v in os.environ.items() if k in keep}


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return bool(answer.status == 200)


def _kwok_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "type": "kwok",
            },
        },
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        },
    }


_STORAGE_CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {
        "name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    },
    "provisioner": "kubernetes.io/no-provisioner",
    "volumeBindingMode": "Immediate",
}


def _volume(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "standard",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": f"/tmp/kwok-volumes/{name}"},
        },
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m testkit.cluster [--nodes N]``: start a cluster, print its kubeconfig and
    start times, serve until SIGTERM or Ctrl-C, then stop it."""
    import argparse
    import json
    import sys
    import tempfile

    from testkit.chart import load_tools

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args(argv)
    binaries = {n: t.path for n, t in load_tools().ensure_control_plane().items()}
    cluster = KubeCluster(Path(tempfile.mkdtemp(prefix="kube-cluster-")), binaries, args.nodes)
    cluster.start()
    print(json.dumps({"kubeconfig": str(cluster.admin_kubeconfig), "timings": cluster.timings}))
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
