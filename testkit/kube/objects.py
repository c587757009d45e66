"""Builders of realistic Kubernetes objects as plain dicts (what the API server serves).

Everything is deterministic: uids, machine ids and addresses derive from names, so a preloaded
cluster is the same on every run. Keyword arguments cover what tests vary; the rest is filled
in the way a kubeadm-style cluster fills it in.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

CREATED = "2025-01-06T09:00:00Z"
STARTED = "2025-01-06T09:01:00Z"
KUBELET_VERSION = "v1.33.1"
_UID_NAMESPACE = uuid.UUID("6f1c6c0e-8a43-4e4b-9a4e-7c1c6f0d2b11")


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def stable_uid(*parts: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, "/".join(parts)))


def short_hash(*parts: str, length: int = 10) -> str:
    """A pod-template-hash-like string: lowercase consonants and digits."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:length])


def _meta(
    kind: str,
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> Obj:
    meta: Obj = {
        "name": name,
        "uid": stable_uid(kind, namespace or "", name),
        "creationTimestamp": CREATED,
        "labels": dict(labels or {}),
    }
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return meta


def owner_reference(obj: Mapping[str, Any], *, controller: bool = True) -> Obj:
    """The ownerReference a controller puts on what it creates."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta.get("uid") or stable_uid(obj["kind"], meta.get("namespace", ""), meta["name"]),
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def namespace(name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
    all_labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta("Namespace", name, None, all_labels),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def node(
    name: str,
    *,
    index: int = 0,
    control_plane: bool = False,
    zone: str = "zone-a",
    labels: Mapping[str, str] | None = None,
    machine_id: str | None = None,
    system_uuid: str | None = None,
    kubelet_version: str = KUBELET_VERSION,
    ready: bool = True,
    architecture: str = "amd64",
) -> Obj:
    """A node with kubeadm/cloud labels, addresses, capacity and `status.nodeInfo`."""
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": architecture,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": architecture,
        "node.kubernetes.io/instance-type": "m6i.xlarge" if not control_plane else "m6i.large",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": zone,
    }
    if control_plane:
        all_labels["node-role.kubernetes.io/control-plane"] = ""
    all_labels.update(labels or {})
    spec: Obj = {
        "podCIDR": f"10.244.{index % 256}.0/24",
        "podCIDRs": [f"10.244.{index % 256}.0/24"],
        "providerID": f"aws:///eu-west-1a/i-{hashlib.md5(name.encode()).hexdigest()[:17]}",
    }
    if control_plane:
        spec["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    ready_condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime is down",
        "lastHeartbeatTime": STARTED,
        "lastTransitionTime": CREATED,
    }
    capacity = {
        "cpu": "4",
        "memory": "16203068Ki",
        "pods": "110",
        "ephemeral-storage": "101430960Ki",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta("Node", name, None, all_labels, {"node.alpha.kubernetes.io/ttl": "0"}),
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "cpu": "3920m", "memory": "15052092Ki"},
            "conditions": [
                {
                    "type": t,
                    "status": "False",
                    "reason": f"KubeletHas{r}",
                    "message": f"kubelet has {m}",
                    "lastHeartbeatTime": STARTED,
                    "lastTransitionTime": CREATED,
                }
                for t, r, m in (
                    ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                    ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                    ("PIDPressure", "SufficientPID", "sufficient PID available"),
                )
            ]
            + [ready_condition],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 4}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": machine_id or hashlib.md5(f"machine/{name}".encode()).hexdigest(),
                "systemUUID": system_uuid or stable_uid("dmi", name),
                "bootID": stable_uid("boot", name),
                "kernelVersion": "6.1.0-28-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": kubelet_version,
                "operatingSystem": "linux",
                "architecture": architecture,
            },
        },
    }


def container(
    name: str,
    image: str,
    *,
    ports: Sequence[int] = (),
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    env: Mapping[str, str] | None = None,
) -> Obj:
    spec: Obj = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if ports:
        spec["ports"] = [{"containerPort": p, "protocol": "TCP"} for p in ports]
    if volume_mounts:
        spec["volumeMounts"] = [dict(m) for m in volume_mounts]
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return spec


def pod_template(
    labels: Mapping[str, str],
    containers: Sequence[Mapping[str, Any]],
    *,
    volumes: Sequence[Mapping[str, Any]] = (),
    service_account: str = "default",
    host_network: bool = False,
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> Obj:
    spec: Obj = {
        "containers": [dict(c) for c in containers],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": service_account,
        "schedulerName": "default-scheduler",
    }
    if volumes:
        spec["volumes"] = [dict(v) for v in volumes]
    if host_network:
        spec["hostNetwork"] = True
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def _selector(labels: Mapping[str, str]) -> Obj:
    return {"matchLabels": dict(labels)}


def _app_labels(name: str, component: str | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": name}
    if component:
        labels["app.kubernetes.io/component"] = component
    return labels


def pod(
    name: str,
    namespace: str,
    *,
    node_name: str | None = None,
    owner: Mapping[str, Any] | None = None,
    phase: str = "Running",
    containers: Sequence[Mapping[str, Any]] | None = None,
    labels: Mapping[str, str] | None = None,
    template: Mapping[str, Any] | None = None,
    restarts: int = 0,
    index: int = 0,
) -> Obj:
    """A pod as the scheduler and kubelet leave it: node, IPs, conditions, container states."""
    spec: Obj = (
        dict(template["spec"])
        if template
        else pod_template({}, containers or [container("app", "nginx:1.27")])["spec"]
    )
    if containers is not None:
        spec["containers"] = [dict(c) for c in containers]
    all_labels = dict(template["metadata"]["labels"]) if template else {}
    all_labels.update(labels or {})
    scheduled = node_name is not None and phase != "Pending"
    if node_name is not None:
        spec["nodeName"] = node_name
    running = phase == "Running"
    finished = phase in ("Succeeded", "Failed")
    status: Obj = {"phase": phase, "qosClass": "Burstable"}
    if scheduled:
        status.update(
            {
                "hostIP": f"10.0.{index // 250 % 256}.{index % 250 + 4}",
                "podIP": f"10.244.{index // 250 % 256}.{index % 250 + 2}",
                "startTime": STARTED,
            }
        )
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": CREATED},
            {"type": "Initialized", "status": "True", "lastTransitionTime": CREATED},
            {
                "type": "ContainersReady",
                "status": "True" if running else "False",
                "lastTransitionTime": STARTED,
            },
            {
                "type": "Ready",
                "status": "True" if running else "False",
                "lastTransitionTime": STARTED,
            },
        ]

        def state() -> Obj:
            if running:
                return {"running": {"startedAt": STARTED}}
            if finished:
                return {
                    "terminated": {
                        "exitCode": 0 if phase == "Succeeded" else 1,
                        "reason": "Completed" if phase == "Succeeded" else "Error",
                        "startedAt": STARTED,
                        "finishedAt": STARTED,
                    }
                }
            return {"waiting": {"reason": "ContainerCreating"}}

        status["containerStatuses"] = [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": f"docker.io/library/{c['image']}@sha256:{_digest(c['image'])}",
                "containerID": f"containerd://{_digest(namespace, name, c['name'])}",
                "ready": running,
                "started": running,
                "restartCount": restarts,
                "state": state(),
            }
            for c in spec["containers"]
        ]
    else:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
                "lastTransitionTime": CREATED,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta("Pod", name, namespace, all_labels, owner=owner),
        "spec": spec,
        "status": status,
    }


def deployment(
    name: str,
    namespace: str,
    *,
    replicas: int = 1,
    image: str = "nginx:1.27",
    labels: Mapping[str, str] | None = None,
    ready_replicas: int | None = None,
    ports: Sequence[int] = (8080,),
) -> Obj:
    selector = _app_labels(name)
    ready = replicas if ready_replicas is None else ready_replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(
            "Deployment",
            name,
            namespace,
            {**selector, **(labels or {})},
            {"deployment.kubernetes.io/revision": "1"},
        ),
        "spec": {
            "replicas": replicas,
            "selector": _selector(selector),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "revisionHistoryLimit": 10,
            "template": pod_template(selector, [container(name, image, ports=ports)]),
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if ready == replicas else "False",
                    "reason": "MinimumReplicasAvailable",
                },
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        },
    }


def replicaset(owner: Mapping[str, Any], *, replicas: int | None = None) -> Obj:
    """The ReplicaSet a Deployment (or an Argo Rollout) owns for its current template."""
    meta = owner["metadata"]
    template = owner["spec"]["template"]
    template_hash = short_hash(meta["namespace"], meta["name"], "template")
    labels = {
        **template["metadata"]["labels"],
        "rollouts-pod-template-hash"
        if owner["kind"] == "Rollout"
        else "pod-template-hash": template_hash,
    }
    count = owner["spec"].get("replicas", 1) if replicas is None else replicas
    name = f"{meta['name']}-{template_hash}"
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _meta(
            "ReplicaSet",
            name,
            meta["namespace"],
            labels,
            {"deployment.kubernetes.io/revision": "1"},
            owner_reference(owner),
        ),
        "spec": {
            "replicas": count,
            "selector": _selector(labels),
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
        "status": {
            "replicas": count,
            "readyReplicas": count,
            "availableReplicas": count,
            "fullyLabeledReplicas": count,
            "observedGeneration": 1,
        },
    }


def statefulset(
    name: str,
    namespace: str,
    *,
    replicas: int = 1,
    image: str = "postgres:16",
    labels: Mapping[str, str] | None = None,
    ports: Sequence[int] = (5432,),
) -> Obj:
    selector = _app_labels(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta("StatefulSet", name, namespace, {**selector, **(labels or {})}),
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": _selector(selector),
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": pod_template(
                selector,
                [
                    container(
                        name,
                        image,
                        ports=ports,
                        volume_mounts=[{"name": "data", "mountPath": "/var/lib/data"}],
                    )
                ],
            ),
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Gi"}},
                    },
                }
            ],
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
            "currentRevision": f"{name}-{short_hash(namespace, name)}",
            "updateRevision": f"{name}-{short_hash(namespace, name)}",
        },
    }


def daemonset(
    name: str,
    namespace: str,
    *,
    desired: int = 1,
    image: str = "registry.k8s.io/kube-proxy:v1.33.1",
    labels: Mapping[str, str] | None = None,
    host_paths: Mapping[str, str] | None = None,
    host_network: bool = False,
    service_account: str = "default",
) -> Obj:
    """A DaemonSet; `host_paths` maps volume names to host directories (mounted at /host/<name>)."""
    selector = _app_labels(name)
    volumes = [
        {"name": vol, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
        for vol, path in (host_paths or {}).items()
    ]
    mounts = [{"name": vol, "mountPath": f"/host/{vol}"} for vol in (host_paths or {})]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(
            "DaemonSet",
            name,
            namespace,
            {**selector, **(labels or {})},
            {"deprecated.daemonset.template.generation": "1"},
        ),
        "spec": {
            "selector": _selector(selector),
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "template": pod_template(
                selector,
                [container(name, image, volume_mounts=mounts)],
                volumes=volumes,
                service_account=service_account,
                host_network=host_network,
                tolerations=[{"operator": "Exists"}],
            ),
        },
        "status": {
            "observedGeneration": 1,
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": desired,
            "numberReady": desired,
            "numberAvailable": desired,
            "updatedNumberScheduled": desired,
            "numberMisscheduled": 0,
        },
    }


def service(
    name: str,
    namespace: str,
    *,
    selector: Mapping[str, str] | None = None,
    ports: Sequence[int] = (80,),
    target_port: int | None = 8080,
    service_type: str = "ClusterIP",
    index: int = 0,
    headless: bool = False,
) -> Obj:
    spec: Obj = {
        "type": service_type,
        "selector": dict(selector if selector is not None else _app_labels(name)),
        "ports": [
            {"name": f"p{p}", "port": p, "protocol": "TCP", "targetPort": target_port or p}
            for p in ports
        ],
        "sessionAffinity": "None",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    }
    if headless:
        spec["clusterIP"] = "None"
        spec["clusterIPs"] = ["None"]
    else:
        address = f"10.96.{index // 250 % 256}.{index % 250 + 2}"
        spec["clusterIP"] = address
        spec["clusterIPs"] = [address]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta("Service", name, namespace, _app_labels(name)),
        "spec": spec,
        "status": {"loadBalancer": {}},
    }


def cronjob(
    name: str, namespace: str, *, schedule: str = "*/15 * * * *", image: str = "busybox:1.37"
) -> Obj:
    labels = _app_labels(name)
    template = pod_template(labels, [container(name, image)])
    template["spec"]["restartPolicy"] = "OnFailure"
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _meta("CronJob", name, namespace, labels),
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "suspend": False,
            "jobTemplate": {"spec": {"backoffLimit": 2, "template": template}},
        },
        "status": {"lastScheduleTime": STARTED, "lastSuccessfulTime": STARTED},
    }


def job(
    name: str,
    namespace: str,
    *,
    owner: Mapping[str, Any] | None = None,
    succeeded: int = 1,
    failed: int = 0,
    image: str = "busybox:1.37",
) -> Obj:
    labels = {"batch.kubernetes.io/job-name": name, "job-name": name}
    if owner is not None:
        template = copy_template(owner["spec"]["jobTemplate"]["spec"]["template"])
    else:
        template = pod_template(_app_labels(name), [container(name, image)])
        template["spec"]["restartPolicy"] = "Never"
    template["metadata"]["labels"].update(labels)
    status: Obj = {"startTime": STARTED, "succeeded": succeeded}
    if failed:
        status["failed"] = failed
    if succeeded:
        status["completionTime"] = STARTED
        status["conditions"] = [
            {"type": "Complete", "status": "True", "lastTransitionTime": STARTED}
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(
            "Job", name, namespace, labels, owner=owner_reference(owner) if owner else None
        ),
        "spec": {"completions": 1, "parallelism": 1, "backoffLimit": 2, "template": template},
        "status": status,
    }


def copy_template(template: Mapping[str, Any]) -> Obj:
    return {
        "metadata": {"labels": dict(template.get("metadata", {}).get("labels", {}))},
        "spec": dict(template["spec"]),
    }


def rollout(
    name: str,
    namespace: str,
    *,
    replicas: int = 3,
    image: str = "ghcr.io/example/web:2.4.0",
    phase: str = "Healthy",
) -> Obj:
    """An Argo Rollout with a canary strategy."""
    selector = _app_labels(name)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": _meta("Rollout", name, namespace, selector),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": _selector(selector),
            "template": pod_template(selector, [container(name, image, ports=(8080,))]),
            "strategy": {
                "canary": {
                    "steps": [
                        {"setWeight": 20},
                        {"pause": {"duration": "1m"}},
                        {"setWeight": 60},
                        {"pause": {}},
                    ]
                }
            },
        },
        "status": {
            "phase": phase,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "currentPodHash": short_hash(namespace, name, "template"),
            "stableRS": short_hash(namespace, name, "template"),
            "observedGeneration": "1",
        },
    }


def lease(
    name: str, namespace: str, *, holder: str | None = None, duration_seconds: int = 15
) -> Obj:
    spec: Obj = {"leaseDurationSeconds": duration_seconds}
    if holder is not None:
        spec.update(
            {
                "holderIdentity": holder,
                "acquireTime": "2025-01-06T09:01:00.000000Z",
                "renewTime": "2025-01-06T09:01:00.000000Z",
                "leaseTransitions": 0,
            }
        )
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": _meta("Lease", name, namespace),
        "spec": spec,
    }
