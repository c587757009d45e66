"""Point the official client at the double: a Configuration object, or a kubeconfig file for a
subprocess (`kubernetes.config.load_kube_config()` reads it through $KUBECONFIG)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import kubernetes.client

CONTEXT = "kube-api-double"


def configuration(
    url: str, token: str, *, ca_path: Path | None = None
) -> kubernetes.client.Configuration:
    import kubernetes.client

    config = kubernetes.client.Configuration()
    config.host = url
    config.api_key = {"authorization": f"Bearer {token}"}
    if ca_path is not None:
        config.ssl_ca_cert = str(ca_path)
    return config


def document(
    url: str, token: str, *, namespace: str | None = None, ca_path: Path | None = None
) -> dict[str, Any]:
    context: dict[str, Any] = {"cluster": CONTEXT, "user": CONTEXT}
    if namespace:
        context["namespace"] = namespace
    cluster: dict[str, Any] = {"server": url}
    if ca_path is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_path.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": context}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def write(
    path: Path,
    url: str,
    token: str,
    *,
    namespace: str | None = None,
    ca_path: Path | None = None,
) -> Path:
    """Write a kubeconfig (mode 0600: it holds a token) and return its path."""
    body = document(url, token, namespace=namespace, ca_path=ca_path)
    _write_private(path, yaml.safe_dump(body, sort_keys=False))
    return path


def write_service_account(
    directory: Path, token: str, *, namespace: str, ca_path: Path | None = None
) -> Path:
    """Lay out what the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount."""
    _write_private(directory / "token", token)
    (directory / "namespace").write_text(namespace)
    if ca_path is not None:
        (directory / "ca.crt").write_bytes(ca_path.read_bytes())
    return directory
