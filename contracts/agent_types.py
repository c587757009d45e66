"""The kinds of agent the Console enrolls."""

from enum import StrEnum


class AgentType(StrEnum):
    HOST = "host"
    K8S_NODE_MONITOR = "k8s-node-monitor"
    K8S_CLUSTER_COLLECTOR = "k8s-cluster-collector"
