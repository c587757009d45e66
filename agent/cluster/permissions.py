"""The Kubernetes API permissions the cluster collector uses: the RBAC the chart must grant.

Derived from what the code calls (:data:`agent.cluster.kinds.KINDS` and the Lease elector), so
a test can hold the chart's rendered ClusterRole and Role to it, and the API double's request
log of a real collection run to it (``tests/agent_k8s/test_rbac.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from agent.cluster.kinds import KINDS

__all__ = [
    "INVENTORY_PERMISSIONS",
    "LEADER_ELECTION_PERMISSIONS",
    "REQUIRED_PERMISSIONS",
    "Permission",
]


class Permission(NamedTuple):
    """One (apiGroup, resource, verb) an RBAC rule must grant; ``""`` is the core group."""

    group: str
    resource: str
    verb: str


# Cluster-wide (the ClusterRole): one paginated list per kind, nothing else.
INVENTORY_PERMISSIONS: frozenset[Permission] = frozenset(
    Permission(kind.group, kind.plural, "list") for kind in KINDS
)

# In the collector's own namespace (the leader-election Role): read, create once, renew by
# replace. Never patch: the chart's Role does not grant it.
LEADER_ELECTION_PERMISSIONS: frozenset[Permission] = frozenset(
    Permission("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
)

REQUIRED_PERMISSIONS: frozenset[Permission] = INVENTORY_PERMISSIONS | LEADER_ELECTION_PERMISSIONS
