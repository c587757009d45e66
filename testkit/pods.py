"""How :class:`testkit.kubelet.KubeletDouble` runs a pod: a node's fake root filesystem
(:class:`FakeHost`), and :class:`PodSandbox`, which turns a pod bound to that node into a real
agent process configured from the pod (env, volumes laid out as symlinks, a ServiceAccount token
bound to the pod). See ``testkit/kubelet.py`` for what this does and does not stand in for."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.agents import AgentProcess, agent_env

SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every API call of the double: the official client waits for ever
on a stalled connection by default, which would stall a node's pods with it."""
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class PodStartError(RuntimeError):
    """The pod cannot start on this node (a mount the kubelet would refuse, say)."""


@dataclass
class FakeHost:
    """A node's root filesystem under ``root``: ``etc/machine-id`` (``"uninitialized"`` where
    ``machine_id`` is None, as systemd writes before first boot), ``sys/class/dmi/id/`` with a
    ``product_uuid`` where one is given, and ``proc`` (the real /proc, for host metrics)."""

    name: str
    root: Path
    machine_id: str | None = None
    product_uuid: str | None = None

    def lay_out(self) -> FakeHost:
        (self.root / "etc").mkdir(parents=True, exist_ok=True)
        self.set_machine_id(self.machine_id)
        dmi = self.root / "sys" / "class" / "dmi" / "id"
        dmi.mkdir(parents=True, exist_ok=True)
        if self.product_uuid is not None:
            (dmi / "product_uuid").write_text(self.product_uuid + "\n")
        if not (self.root / "proc").exists():
            (self.root / "proc").symlink_to("/proc")
        return self

    def set_machine_id(self, machine_id: str | None) -> None:
        self.machine_id = machine_id
        (self.root / "etc" / "machine-id").write_text((machine_id or "uninitialized") + "\n")

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")


class PodSandbox:
    """Turns pods into agent processes: ``api`` an admin ``ApiClient`` (secrets, config maps,
    claims, TokenRequest), ``api_port`` the API server's loopback port (the pods'
    ``KUBERNETES_SERVICE_PORT``), ``workdir`` where pod directories go, ``env`` laid over every
    agent's environment."""

    def __init__(self, api: Any, api_port: int, workdir: Path, env: Mapping[str, str]) -> None:
        self._api = api
        self.api_port = api_port
        self.workdir = workdir
        self.env = dict(env)

    def agent_for(
        self, host: FakeHost, pod: dict[str, Any], container: dict[str, Any]
    ) -> AgentProcess:
        meta = pod["metadata"]
        base = self.workdir / "pods" / f"{meta['name']}-{meta['uid'][:8]}"
        volumes = {
            v["name"]: self._volume(host, pod, v, base / "volumes" / v["name"])
            for v in pod["spec"].get("volumes") or []
        }
        rootfs = base / "rootfs"
        mounts = sorted(container.get("volumeMounts") or [], key=lambda m: m["mountPath"])
        for mount in mounts:
            target = volumes[mount["name"]]
            if mount.get("subPath"):
                target = target / mount["subPath"]
            _link(rootfs, mount["mountPath"], target)
        mount_paths = [m["mountPath"] for m in mounts]
        env = self._env(pod, container)
        for key, value in list(env.items()):
            if _in_mounts(value, mount_paths):
                env[key] = str(rootfs) + value
        # The agent's "/" is the container's root, not this machine's (its /etc/machine-id …).
        env.setdefault("PROXIMA_HOST_ROOT", str(rootfs))
        if SERVICE_ACCOUNT_MOUNT in mount_paths:
            env["PROXIMA_SERVICE_ACCOUNT_DIR"] = str(rootfs) + SERVICE_ACCOUNT_MOUNT
        env.update(
            {
                "KUBECONFIG": "",  # a pod has none: in-cluster configuration
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(self.api_port),
                "PROXIMA_HEALTH_HOST": "127.0.0.1",  # no pod network namespace here
                **self.env,
            }
        )
        data_dir = Path(env.get("PROXIMA_DATA_DIR") or rootfs / "var/lib/proxima-agent")
        agent = AgentProcess(
            data_dir,
            name=env.get("PROXIMA_AGENT_NAME"),
            log_path=self.workdir / "logs" / f"{meta['name']}-{meta['uid'][:8]}.log",
        )
        # Only what the pod says (and the test's overlay): not the kit's fast test settings.
        agent.env = {**agent_env(), **env}
        return agent

    def _env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in container.get("env") or []:
            if "valueFrom" in var:
                value = self._value_from(pod, var["valueFrom"])
            else:
                value = _VAR.sub(lambda m: env.get(m[1], m[0]), var.get("value") or "")
            env[var["name"]] = value
        return env

    def _value_from(self, pod: dict[str, Any], source: dict[str, Any]) -> str:
        import kubernetes.client as k8s

        ns = pod["metadata"]["namespace"]
        if "fieldRef" in source:
            return _field(pod, source["fieldRef"]["fieldPath"])
        core: Any = k8s.CoreV1Api(self._api)
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = core.read_namespaced_secret(ref["name"], ns, _request_timeout=REQUEST_TIMEOUT)
            return _decode((secret.data or {})[ref["key"]])
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return str(
                core.read_namespaced_config_map(
                    ref["name"], ns, _request_timeout=REQUEST_TIMEOUT
                ).data[ref["key"]]
            )
        raise PodStartError(f"env source {sorted(source)} is not supported by the double")

    def _volume(
        self, host: FakeHost, pod: dict[str, Any], volume: dict[str, Any], here: Path
    ) -> Path:
        if "hostPath" in volume:
            return _host_path(host, volume["hostPath"])
        if "emptyDir" in volume:
            here.mkdir(parents=True, exist_ok=True)
            return here
        if "persistentVolumeClaim" in volume:
            return self._claim(host, pod, volume["persistentVolumeClaim"]["claimName"])
        files: dict[str, str | bytes] = {}
        if "secret" in volume:
            files = self._secret_files(pod, volume["secret"])
        elif "configMap" in volume:
            files = self._config_map_files(pod, volume["configMap"])
        elif "projected" in volume:
            for source in volume["projected"].get("sources") or []:
                files.update(self._projected(pod, source))
        else:
            raise PodStartError(f"volume {volume['name']}: this kind is not supported")
        for rel, content in files.items():
            path = here / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode() if isinstance(content, str) else content
            path.write_bytes(data)
        here.mkdir(parents=True, exist_ok=True)
        return here

    def _secret_files(self, pod: dict[str, Any], spec: dict[str, Any]) -> dict[str, str | bytes]:
        import base64

        import kubernetes.client as k8s

        core: Any = k8s.CoreV1Api(self._api)
        secret = core.read_namespaced_secret(
            spec["secretName"], pod["metadata"]["namespace"], _request_timeout=REQUEST_TIMEOUT
        )
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        return _items(data, spec.get("items"))

    def _config_map_files(
        self, pod: dict[str, Any], spec: dict[str, Any]
    ) -> dict[str, str | bytes]:
        import kubernetes.client as k8s

        core: Any = k8s.CoreV1Api(self._api)
        cm = core.read_namespaced_config_map(
            spec["name"], pod["metadata"]["namespace"], _request_timeout=REQUEST_TIMEOUT
        )
        return _items(dict(cm.data or {}), spec.get("items"))

    def _projected(self, pod: dict[str, Any], source: dict[str, Any]) -> dict[str, str | bytes]:
        if "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            return {spec["path"]: self._token(pod, spec)}
        if "configMap" in source:
            return self._config_map_files(pod, source["configMap"])
        if "secret" in source:
            return self._secret_files(
                pod, {"secretName": source["secret"]["name"], **source["secret"]}
            )
        if "downwardAPI" in source:
            return {
                item["path"]: _field(pod, item["fieldRef"]["fieldPath"])
                for item in source["downwardAPI"].get("items") or []
            }
        raise PodStartError(f"projected source {sorted(source)} is not supported")

    def _token(self, pod: dict[str, Any], spec: dict[str, Any]) -> str:
        """A token from the TokenRequest API, bound to this pod (as the kubelet asks for it)."""
        import kubernetes.client as k8s

        meta = pod["metadata"]
        request = k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(
                audiences=[spec["audience"]] if spec.get("audience") else [],
                expiration_seconds=int(spec.get("expirationSeconds") or 3607),
                bound_object_ref=k8s.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=meta["name"], uid=meta["uid"]
                ),
            )
        )
        core: Any = k8s.CoreV1Api(self._api)
        answer = core.create_namespaced_service_account_token(
            pod["spec"].get("serviceAccountName") or "default",
            meta["namespace"],
            request,
            _request_timeout=REQUEST_TIMEOUT,
        )
        return str(answer.status.token)

    def _claim(self, host: FakeHost, pod: dict[str, Any], claim: str) -> Path:
        import kubernetes.client as k8s

        core: Any = k8s.CoreV1Api(self._api)
        pvc = core.read_namespaced_persistent_volume_claim(
            claim, pod["metadata"]["namespace"], _request_timeout=REQUEST_TIMEOUT
        )
        if not pvc.spec.volume_name:
            raise PodStartError(f"claim {claim} is not bound")
        pv = core.read_persistent_volume(pvc.spec.volume_name, _request_timeout=REQUEST_TIMEOUT)
        if pv.spec.host_path is None:
            raise PodStartError(f"volume {pv.metadata.name} is not a hostPath volume")
        return _host_path(host, {"path": pv.spec.host_path.path, "type": "DirectoryOrCreate"})


def _host_path(host: FakeHost, spec: Mapping[str, Any]) -> Path:
    """A hostPath volume on ``host``, checked by its ``type`` as the kubelet checks it."""
    path = host.path(str(spec["path"]))
    kind = spec.get("type") or ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    elif kind == "Directory" and not path.is_dir():
        raise PodStartError(f"hostPath type check failed: {spec['path']} is not a directory")
    elif kind == "File" and not path.is_file():
        raise PodStartError(f"hostPath type check failed: {spec['path']} is not a file")
    return path


def _link(rootfs: Path, mount_path: str, target: Path) -> None:
    """``rootfs/<mount_path>`` → ``target``. A mount inside an earlier one must already show
    the same thing there (a symlink cannot be laid inside another mount's host directory)."""
    link = rootfs / mount_path.lstrip("/")
    for ancestor in link.parents:
        if ancestor == rootfs:
            break
        if ancestor.is_symlink():
            if os.path.realpath(link) == os.path.realpath(target):
                return
            raise PodStartError(f"mount {mount_path} nests inside another mount")
    if link.is_symlink():
        raise PodStartError(f"{mount_path} is mounted twice")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _in_mounts(value: str, mount_paths: Iterable[str]) -> bool:
    """An absolute path at, under or above one of the container's mount points."""
    if not value.startswith("/") or value.startswith("//"):
        return False
    value = value.rstrip("/") or "/"
    for mount in mount_paths:
        if value == mount or mount.startswith(value + "/") or value.startswith(mount + "/"):
            return True
    return False


def _field(pod: Mapping[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    fields = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP") or "127.0.0.2",
        "status.podIP": status.get("podIP") or "127.0.0.1",
    }
    if path not in fields:
        raise PodStartError(f"fieldRef {path} is not supported by the double")
    return str(fields[path] or "")


def _items(data: Mapping[str, str | bytes], items: list[dict[str, Any]] | None) -> dict[str, Any]:
    if not items:
        return dict(data)
    return {item["path"]: data[item["key"]] for item in items}


def _decode(value: str) -> str:
    import base64

    return base64.b64decode(value).decode()
