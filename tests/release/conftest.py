"""The release lane's shared state: one key, one authenticated Helm repository, one published
release (the pipeline runs once per test run: it builds an image)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.chart import Helm
from testkit.chart_repos import ChartRepository, RepoUsers
from testkit.release import OciRegistry, publish, run_release


@pytest.fixture(scope="session")
def release_key(oci_registry: OciRegistry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway GPG release key made by ``release.py keygen``."""
    home = tmp_path_factory.mktemp("gnupg")
    done = run_release("keygen", "--gpg-home", str(home))
    assert done.returncode == 0, done.stderr
    return home


@pytest.fixture(scope="session")
def helm_repo(
    repo_users: RepoUsers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartRepository]:
    """The classic Helm repository: Debian's nginx on 127.0.0.1 behind basic auth (reads: the
    deploy token and the publisher; uploads by PUT: the publisher)."""
    repo = ChartRepository(
        tmp_path_factory.mktemp("helm-repo"), repo_users.readers, repo_users.publishers
    )
    try:
        yield repo.start()
    finally:
        repo.stop()


@pytest.fixture(scope="session")
def published(
    oci_registry: OciRegistry,
    helm_repo: ChartRepository,
    repo_users: RepoUsers,
    release_key: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """``release.py publish --json`` with the publisher's credentials in its environment:
    image and chart in the registry, the chart uploaded to ``helm_repo``, everything signed
    with ``release_key``."""
    return publish(
        oci_registry, helm_repo, repo_users, tmp_path_factory.mktemp("dist"), release_key
    )


@pytest.fixture(scope="session")
def registry_auth(
    oci_registry: OciRegistry,
    repo_users: RepoUsers,
    helm_binary: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """The deploy token's registry login (``helm registry login --password-stdin``), as the
    auth file skopeo reads with ``--authfile``."""
    helm = Helm(helm_binary, tmp_path_factory.mktemp("login-home"))
    config = helm.home / "registry.json"
    done = helm.run(
        ["registry", "login", oci_registry.host, "--username", repo_users.deploy.username,
         "--password-stdin", "--plain-http", "--registry-config", str(config)],
        stdin=repo_users.deploy.password,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return config


@pytest.fixture(scope="session")
def pulled(
    published: dict[str, Any],
    oci_registry: OciRegistry,
    registry_auth: Path,
    tmp_path_factory: pytest.TempPathFactory,
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
            "--src-authfile",
            str(registry_auth),
            f"docker://{ref}",
            f"oci:{layout}:pulled",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return layout
