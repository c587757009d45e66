"""The cluster collector (``k8s-cluster-collector``, the chart's StatefulSet).

Inventory of the cluster through the official kubernetes client, one leader among the replicas
through a ``coordination.k8s.io`` Lease. This is the only package of the agent that imports the
kubernetes client (import-linter): the runtime reaches it through
:func:`agent.collectors.default_collectors`, for this agent type only, so host and node agents
never load it. See ``docs/kubernetes-agents.md``.
"""

from agent.cluster.collector import ClusterCollector, cluster_collectors
from agent.cluster.election import STANDING_BY, LeaseElector, LeaseLock, LeaseTiming
from agent.cluster.inventory import (
    ROLLOUTS_FORBIDDEN,
    InventoryConfig,
    InventoryReader,
    KubernetesUnavailableError,
)
from agent.cluster.kinds import KINDS
from agent.cluster.permissions import (
    INVENTORY_PERMISSIONS,
    LEADER_ELECTION_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    Permission,
)

__all__ = [
    "INVENTORY_PERMISSIONS",
    "KINDS",
    "LEADER_ELECTION_PERMISSIONS",
    "REQUIRED_PERMISSIONS",
    "ROLLOUTS_FORBIDDEN",
    "STANDING_BY",
    "ClusterCollector",
    "InventoryConfig",
    "InventoryReader",
    "KubernetesUnavailableError",
    "LeaseElector",
    "LeaseLock",
    "LeaseTiming",
    "Permission",
    "cluster_collectors",
]
