"""Problems a cluster inventory sync reports alongside its snapshot."""

from enum import StrEnum


class InventoryProblemKind(StrEnum):
    """Why a kind is missing from a snapshot (derived from ``agent/cluster/inventory.py``)."""

    FORBIDDEN_ARGO_ROLLOUTS = "forbidden_argo_rollouts"
    """403 on argoproj.io rollouts: the chart predates Argo Rollouts support."""
    FORBIDDEN = "forbidden"
    """403 on another kind: the ClusterRole does not grant list on it."""
    UNREADABLE = "unreadable"
    """Any other answer that is not the API being unavailable (that fails the whole sync)."""
