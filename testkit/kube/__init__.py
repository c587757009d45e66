"""A Kubernetes API server double for tests: the official client talks to it over real HTTP.

    from testkit.kube import KubeApiDouble, preload_fleet

    with KubeApiDouble() as kube:
        fleet = preload_fleet(kube)                     # 5,000 pods, deterministic
        api = kubernetes.client.CoreV1Api(kube.api_client())
        kube.write_kubeconfig(tmp_path / "kubeconfig")   # for subprocesses (KUBECONFIG=…)
        kube.set_rollouts("forbidden")               # or kube.forbid()/fail()/down()/up()
        kube.permissions()                           # {(group, resource, verb), …} called

See docs/testing-kubernetes.md.
"""

from testkit.kube import objects
from testkit.kube.audit import Permission, RecordedRequest
from testkit.kube.authorization import DEFAULT_TOKEN, DEFAULT_USER, PolicyRule, RbacPolicy
from testkit.kube.errors import StatusError, UnknownResourceError
from testkit.kube.faults import Fault, InjectedFault
from testkit.kube.fleet import Fleet, FleetSpec, build_fleet, preload_fleet
from testkit.kube.resources import CATALOGUE, ResourceType
from testkit.kube.server import AppliedObject, KubeApiDouble, RolloutsMode, ServerState
from testkit.kube.store import ListPage, ObjectStore, WatchEvent

__all__ = [
    "CATALOGUE",
    "DEFAULT_TOKEN",
    "DEFAULT_USER",
    "AppliedObject",
    "Fault",
    "Fleet",
    "FleetSpec",
    "InjectedFault",
    "KubeApiDouble",
    "ListPage",
    "ObjectStore",
    "Permission",
    "PolicyRule",
    "RbacPolicy",
    "RecordedRequest",
    "ResourceType",
    "RolloutsMode",
    "ServerState",
    "StatusError",
    "UnknownResourceError",
    "WatchEvent",
    "build_fleet",
    "objects",
    "preload_fleet",
]
