"""The official kubernetes client, configured for this process only (never the global default).

In a pod: in-cluster configuration from the ServiceAccount mount (``PROXIMA_SERVICE_ACCOUNT_DIR``,
default ``/var/run/secrets/kubernetes.io/serviceaccount``) and ``KUBERNETES_SERVICE_HOST``/
``_PORT``; the token is re-read as it rotates. Elsewhere (development, tests): the kubeconfig
that ``$KUBECONFIG`` names. ``$KUBECONFIG`` wins when both are present.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

__all__ = ["ClientConfigError", "make_api_client"]


class ClientConfigError(Exception):
    """Neither in-cluster credentials nor a kubeconfig could be loaded."""

    def __init__(self, source: str, detail: str) -> None:
        super().__init__(f"{source}: {detail}")
        self.source = source
        self.detail = detail


def make_api_client(
    service_account_dir: Path, *, user_agent: str, environ: dict[str, str] | None = None
) -> client.ApiClient:
    # urllib3 warns on every retry of every call: an API server that is down for an hour would
    # flood the log the collector keeps to one line per failure.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    env = dict(os.environ if environ is None else environ)
    configuration = client.Configuration()
    kubeconfig = env.get("KUBECONFIG")
    try:
        if kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
        else:
            loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=str(service_account_dir / "token"),
                cert_filename=str(service_account_dir / "ca.crt"),
                environ=env,
            )
            loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as e:
        source = f"kubeconfig {kubeconfig}" if kubeconfig else f"in-cluster ({service_account_dir})"
        raise ClientConfigError(source, str(e) or e.__class__.__name__) from None
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api
