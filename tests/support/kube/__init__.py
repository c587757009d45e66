"""A Kubernetes API server double for tests: the official client talks to it over real HTTP.

    from tests.support.kube import KubeApiDouble, seed_fleet

    with KubeApiDouble() as kube:
        fleet = seed_fleet(kube)                     # 5,000 pods, deterministic
        api = kubernetes.client.CoreV1Api(kube.api_client())
        kube.write_kubeconfig(tmp_path / "kubeconfig")   # for subprocesses (KUBECONFIG=…)
        kube.set_rollouts("forbidden")               # or kube.forbid()/fail()/down()/up()
        kube.permissions()                           # {(group, resource, verb), …} called

See docs/testing-kubernetes.md.
"""

from tests.support.kube import objects
from tests.support.kube.audit import Permission, RecordedRequest
from tests.support.kube.authorization import DEFAULT_TOKEN, DEFAULT_USER, PolicyRule, RbacPolicy
from tests.support.kube.errors import StatusError, UnknownResourceError
from tests.support.kube.faults import Fault, InjectedFault
from tests.support.kube.fleet import Fleet, FleetSpec, build_fleet, seed_fleet
from tests.support.kube.resources import CATALOGUE, ResourceType
from tests.support.kube.server import AppliedObject, KubeApiDouble, RolloutsMode, ServerState
from tests.support.kube.store import ListPage, ObjectStore, WatchEvent

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
    "seed_fleet",
]
