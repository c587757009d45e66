"""The release lane's shared state: one key, one static Helm repository, one published release
(the pipeline runs once per test run: it builds an image)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.release import OciRegistry, StaticServer, publish, run_release


@pytest.fixture(scope="session")
def release_key(oci_registry: OciRegistry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway GPG release key made by ``release.py keygen``."""
    home = tmp_path_factory.mktemp("gnupg")
    done = run_release("keygen", "--gpg-home", str(home))
    assert done.returncode == 0, done.stderr
    return home


@pytest.fixture(scope="session")
def helm_repo(
    oci_registry: OciRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StaticServer]:
    server = StaticServer(tmp_path_factory.mktemp("helm-repo"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def published(
    oci_registry: OciRegistry,
    helm_repo: StaticServer,
    release_key: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """``release.py publish --json``: image and chart in the registry, the classic repository
    in ``helm_repo``, everything signed with ``release_key``."""
    return publish(oci_registry, helm_repo, tmp_path_factory.mktemp("dist"), release_key)


@pytest.fixture(scope="session")
def pulled(
    published: dict[str, Any], oci_registry: OciRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The published image pulled back by digest with skopeo into an OCI layout (tag
    ``pulled``)."""
    layout = tmp_path_factory.mktemp("pulled") / "oci"
    ref = f"{oci_registry.host}/proxima/proxima-agent@{published['image_digest']}"
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            f"docker://{ref}",
            f"oci:{layout}:pulled",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return layout
