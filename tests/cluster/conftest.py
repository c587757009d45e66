"""Helpers only the ``tests/cluster`` lane uses (the fixtures are in ``testkit/fixtures.py``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

import pytest

from testkit.chart import RELEASE
from testkit.cluster_cli import ClusterCli


@pytest.fixture
def namespace(cluster_cli: ClusterCli, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace name unique to the test. Afterwards the release in it is uninstalled (so no
    cluster-scoped RBAC object of a failed test stays behind) and the namespace is deleted."""
    words = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().removeprefix("test_"))
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
    name = f"{words[:40].strip('-')}-{digest}"
    yield name
    cluster_cli.helm("uninstall", RELEASE, "-n", name, "--ignore-not-found", check=False)
    cluster_cli.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")
