"""Applying rendered manifests (e.g. `helm template` output) and seeing the change."""

from __future__ import annotations

import kubernetes.client as k8s

from testkit.kube import KubeApiDouble, WatchEvent

MANIFESTS = """
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: proxima-agent
  namespace: proxima-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: proxima-agent-cluster-agent
rules:
  - apiGroups: [""]
    resources: ["pods", "nodes"]
    verbs: ["get", "list"]
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: proxima-agent-node
  namespace: proxima-system
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: proxima-agent-node}
  template:
    metadata:
      labels: {app.kubernetes.io/name: proxima-agent-node}
    spec:
      containers:
        - name: agent
          image: ghcr.io/example/proxima-agent:0.8.0
      volumes:
        - name: data
          hostPath: {path: HOSTPATH, type: DirectoryOrCreate}
"""


def test_manifests_are_created_then_configured_or_left_unchanged(
    kube_api: KubeApiDouble, kube_client: k8s.ApiClient
) -> None:
    changes: list[WatchEvent] = []
    first = kube_api.apply_manifests(MANIFESTS.replace("HOSTPATH", "/var/lib/proxima-agent"))
    assert [(a.kind, a.action) for a in first] == [
        ("ServiceAccount", "created"),
        ("ClusterRole", "created"),
        ("DaemonSet", "created"),
    ]
    unsubscribe = kube_api.on_change(changes.append)
    second = kube_api.apply_manifests(MANIFESTS.replace("HOSTPATH", "/srv/proxima"))
    unsubscribe()
    assert [a.action for a in second] == ["unchanged", "unchanged", "configured"]
    assert [(e.type, e.resource.kind) for e in changes] == [("MODIFIED", "DaemonSet")]

    ds = k8s.AppsV1Api(kube_client).read_namespaced_daemon_set(
        "proxima-agent-node", "proxima-system"
    )
    assert ds.spec.template.spec.volumes[0].host_path.path == "/srv/proxima"
    assert ds.metadata.generation == 2
    role = k8s.RbacAuthorizationV1Api(kube_client).read_cluster_role("proxima-agent-cluster-agent")
    assert role.rules[0].verbs == ["get", "list"]
