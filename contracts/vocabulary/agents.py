"""Agents: their kinds, and the status and flags the Console computes for each record."""

from enum import StrEnum


class AgentType(StrEnum):
    HOST = "host"
    K8S_NODE_MONITOR = "k8s-node-monitor"
    K8S_CLUSTER_COLLECTOR = "k8s-cluster-collector"


class AgentStatus(StrEnum):
    """Computed when read, never stored: ``revoked`` and ``released`` first, then whether the
    record was seen within the stale timeout (``rollout_policy.identities.is_online``)."""

    ONLINE = "online"
    OFFLINE = "offline"
    RELEASED = "released"
    REVOKED = "revoked"


class AgentFlag(StrEnum):
    """Findings on a record that an operator (or a flow) should look at."""

    SHARED_IDENTITY = "shared_identity"
    VERSION_FLAPPING = "version_flapping"
    ENROLLMENT_CONFLICT = "enrollment_conflict"
    NO_IDENTITY_EVIDENCE = "no_identity_evidence"
    CANNOT_SELF_UPDATE = "cannot_self_update"
    REFUSED_STILL_CONNECTING = "refused_still_connecting"
    REBOUND = "rebound"
    """Re-bound onto another machine (quiet, evidence matched) within the last week."""
