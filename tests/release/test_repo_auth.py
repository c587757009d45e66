"""Both publications want credentials, as the chart's page's GitLab registry does: a wrong
password is refused with 401 by the classic repository (nginx, basic auth) and by the OCI
registry (docker-registry, htpasswd); a read-only deploy token cannot upload; and
``release.py publish`` takes its credentials from the environment and refuses without them,
before building anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from testkit.chart import Helm
from testkit.chart_repos import ChartRepository, Credentials, RepoUsers
from testkit.release import OciRegistry, run_release


@pytest.fixture
def fresh_helm(helm_binary: Path, tmp_path: Path) -> Helm:
    return Helm(helm_binary, tmp_path / "helm-home")


@pytest.fixture
def repo(repo_users: RepoUsers, tmp_path: Path):
    server = ChartRepository(tmp_path / "repo", repo_users.readers, repo_users.publishers)
    try:
        yield server.start()
    finally:
        server.stop()


def _repo_add(helm: Helm, url: str, user: Credentials) -> subprocess.CompletedProcess[str]:
    return helm.run(
        ["repo", "add", "proxima", url, "--username", user.username, "--password-stdin"],
        stdin=user.password,
    )


def _login(helm: Helm, host: str, user: Credentials) -> subprocess.CompletedProcess[str]:
    return helm.run(
        ["registry", "login", host, "--username", user.username, "--password-stdin",
         "--plain-http"],
        stdin=user.password,
    )  # fmt: skip


def test_the_helm_repository_refuses_a_wrong_password_with_401(
    repo: ChartRepository, repo_users: RepoUsers, fresh_helm: Helm
):
    (repo.directory / "index.yaml").write_text("apiVersion: v1\nentries: {}\n")
    assert httpx.get(f"{repo.url}/index.yaml").status_code == 401
    wrong = repo_users.deploy.wrong()
    assert httpx.get(f"{repo.url}/index.yaml", auth=wrong.auth).status_code == 401
    refused = _repo_add(fresh_helm, repo.url, wrong)
    assert refused.returncode != 0
    assert "401" in refused.stderr, refused.stderr
    assert wrong.password not in refused.stderr + refused.stdout
    added = _repo_add(fresh_helm, repo.url, repo_users.deploy)
    assert added.returncode == 0, added.stderr


def test_only_the_publisher_uploads_to_the_helm_repository(
    repo: ChartRepository, repo_users: RepoUsers
):
    url = f"{repo.url}/signatures/x/signature-1"
    assert httpx.put(url, content=b"x", auth=repo_users.deploy.auth).status_code == 401
    assert httpx.put(url, content=b"x", auth=repo_users.publisher.wrong().auth).status_code == 401
    assert not (repo.directory / "signatures").exists()
    assert httpx.put(url, content=b"x", auth=repo_users.publisher.auth).status_code == 201
    assert httpx.get(url, auth=repo_users.deploy.auth).content == b"x"


def test_the_oci_registry_refuses_a_wrong_password_with_401(
    oci_registry: OciRegistry, repo_users: RepoUsers, fresh_helm: Helm
):
    v2 = f"http://{oci_registry.host}/v2/"
    wrong = repo_users.deploy.wrong()
    assert httpx.get(v2).status_code == 401
    assert httpx.get(v2, auth=wrong.auth).status_code == 401
    assert httpx.get(v2, auth=repo_users.deploy.auth).status_code == 200
    refused = _login(fresh_helm, oci_registry.host, wrong)
    assert refused.returncode != 0
    assert "401" in refused.stderr, refused.stderr
    # Not logged in, a pull is refused too (helm: the 401 challenge found no credential).
    pulled = fresh_helm.run(
        ["pull", f"oci://{oci_registry.host}/proxima/charts/proxima-agent", "--plain-http"]
    )
    assert pulled.returncode != 0
    assert "basic credential not found" in pulled.stderr, pulled.stderr
    assert _login(fresh_helm, oci_registry.host, repo_users.deploy).returncode == 0


def test_publish_refuses_without_credentials_in_its_environment(
    oci_registry: OciRegistry, repo: ChartRepository, tmp_path: Path
):
    done = run_release(
        "publish", "--registry", oci_registry.host, "--plain-http", "--repo-url", repo.url,
        "--out", str(tmp_path), "--no-sign",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"release: error: the registry {oci_registry.host} wants credentials: set "
        "PROXIMA_RELEASE_REGISTRY_USERNAME and PROXIMA_RELEASE_REGISTRY_PASSWORD (or "
        "PROXIMA_RELEASE_REGISTRY_PASSWORD_FILE) in the environment"
    )
    assert not (tmp_path / "oci").exists()  # nothing was built


def test_publish_stops_at_a_refused_login_before_building(
    oci_registry: OciRegistry, repo: ChartRepository, repo_users: RepoUsers, tmp_path: Path
):
    password_file = tmp_path / "registry-password"
    password_file.write_text(repo_users.publisher.wrong().password + "\n")
    env = {
        **repo_users.release_env(),
        "PROXIMA_RELEASE_REGISTRY_PASSWORD": "",
        "PROXIMA_RELEASE_REGISTRY_PASSWORD_FILE": str(password_file),
    }
    done = run_release(
        "publish", "--registry", oci_registry.host, "--plain-http", "--repo-url", repo.url,
        "--out", str(tmp_path / "out"), "--no-sign", env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(f"release: error: helm registry login {oci_registry.host} failed:")
    )
    assert "401" in done.stderr
    assert repo_users.publisher.password not in done.stderr
    assert not (tmp_path / "out" / "oci").exists()


def test_publish_stops_at_refused_repository_credentials_before_building(
    oci_registry: OciRegistry, repo: ChartRepository, repo_users: RepoUsers, tmp_path: Path
):
    env = {
        **repo_users.release_env(),
        "PROXIMA_RELEASE_REPO_PASSWORD": repo_users.publisher.wrong().password,
    }
    done = run_release(
        "publish", "--registry", oci_registry.host, "--plain-http", "--repo-url", repo.url,
        "--out", str(tmp_path / "out"), "--no-sign", env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"release: error: GET {repo.url}/index.yaml: HTTP 401 Unauthorized"
    )
    assert not (tmp_path / "out" / "oci").exists()
    assert not (tmp_path / "out" / "auth" / "registry.json").exists()  # the login is removed
