"""Tests of the Kubernetes API double itself, driven through the official client."""

from tests.support.kube.fixtures import kube_api, kube_client, kube_kubeconfig

__all__ = ["kube_api", "kube_client", "kube_kubeconfig"]
