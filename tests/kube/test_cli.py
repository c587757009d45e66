"""`python -m testkit.kube` serves a preloaded double to other processes until SIGTERM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes.client as k8s
from kubernetes import config

from testkit import REPO


def test_the_standalone_double_serves_a_kubeconfig_client(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testkit.kube",
            "--kubeconfig",
            str(kubeconfig),
            "--pods",
            "120",
            "--nodes",
            "4",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["url"].startswith("http://127.0.0.1:")
        client = config.new_client_from_config(config_file=str(kubeconfig))
        with client:
            pods = k8s.CoreV1Api(client).list_pod_for_all_namespaces().items
        assert len(pods) == 120
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
