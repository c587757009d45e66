"""The Pod Security Standards' ``restricted`` profile (baseline included), as checks on a pod spec.

Written from https://kubernetes.io/docs/concepts/security/pod-security-standards/ (policy
version v1.26, the chart's oldest supported Kubernetes). ``restricted_violations`` returns one
line per broken rule, so an assertion failure says what to fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

BASELINE_ADDABLE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
    }
)
ALLOWED_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})


def _containers(spec: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _baseline(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    pod_sc = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"host namespaces: {field} is true"
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        yield "HostProcess: pod windowsOptions.hostProcess is true"
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f"hostPath volumes: volume {volume['name']!r} is a hostPath"
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            yield f"sysctls: {sysctl['name']} is not in the safe set"
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield "seccomp: pod seccompProfile is Unconfined"
    if (pod_sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        yield "AppArmor: pod appArmorProfile is Unconfined"
    selinux = pod_sc.get("seLinuxOptions") or {}
    if (
        selinux.get("type", "") not in ALLOWED_SELINUX_TYPES
        or selinux.get("user")
        or selinux.get("role")
    ):
        yield "SELinux: pod seLinuxOptions sets a custom user, role or type"
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            yield f"AppArmor: annotation {key}={value}"
    for c in _containers(spec):
        name = c["name"]
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            yield f"privileged: container {name!r} is privileged"
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield f"HostProcess: container {name!r}"
        added = set((sc.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_ADDABLE_CAPABILITIES:
            yield f"capabilities: container {name!r} adds {sorted(added)}"
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                yield f"host ports: container {name!r} uses hostPort {port['hostPort']}"
        if sc.get("procMount", "Default") != "Default":
            yield f"/proc mount: container {name!r} uses procMount {sc['procMount']}"
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"seccomp: container {name!r} seccompProfile is Unconfined"
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            yield f"AppArmor: container {name!r} appArmorProfile is Unconfined"
        selinux = sc.get("seLinuxOptions") or {}
        if (
            selinux.get("type", "") not in ALLOWED_SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            yield f"SELinux: container {name!r} sets a custom user, role or type"


def _restricted(spec: Mapping[str, Any]) -> Iterator[str]:
    pod_sc = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            yield f"volume types: volume {volume['name']!r} is {sorted(kinds)}"
    pod_non_root = pod_sc.get("runAsNonRoot") is True
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_sc.get("runAsUser") == 0:
        yield "non-root user: pod runAsUser is 0"
    for c in _containers(spec):
        name = c["name"]
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"privilege escalation: container {name!r} does not set it false"
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            yield f"running as non-root: container {name!r} may run as root"
        if sc.get("runAsUser") == 0:
            yield f"non-root user: container {name!r} runAsUser is 0"
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield f"seccomp: container {name!r} has no RuntimeDefault or Localhost profile"
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"capabilities: container {name!r} does not drop ALL"
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"capabilities: container {name!r} adds more than NET_BIND_SERVICE"


def restricted_violations(
    spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None
) -> list[str]:
    """Every rule of the restricted profile the pod spec breaks; empty when it complies."""
    return [*_baseline(spec, annotations or {}), *_restricted(spec)]
