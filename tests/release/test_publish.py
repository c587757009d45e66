"""The release pipeline publishes: the image and the chart in an OCI registry, a classic Helm
repository beside them, both wanting credentials as the chart's page's does, both installable
as it shows (`helm registry login` + `helm install oci://…`, `helm repo add --username
--password-stdin` + `helm install proxima/proxima-agent`), the image pinned by digest,
signed."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import contracts
from testkit.chart import Helm, Rendering
from testkit.chart_repos import ChartRepository, Credentials, RepoUsers
from testkit.release import OciRegistry

INSTALL = ["--namespace", "proxima-system", "--dry-run=client"]


@pytest.fixture
def fresh_helm(helm_binary: Path, tmp_path: Path) -> Helm:
    """Helm with a home of its own: `helm repo add` must not leak into the chart tests."""
    return Helm(helm_binary, tmp_path / "helm-home")


def repo_add(helm: Helm, url: str, user: Credentials) -> subprocess.CompletedProcess[str]:
    """``helm repo add`` as the chart's page runs it, the password on stdin."""
    return helm.run(
        ["repo", "add", "proxima", url, "--username", user.username, "--password-stdin"],
        stdin=user.password,
    )


def registry_login(helm: Helm, host: str, user: Credentials) -> subprocess.CompletedProcess[str]:
    return helm.run(
        ["registry", "login", host, "--username", user.username, "--password-stdin",
         "--plain-http"],
        stdin=user.password,
    )  # fmt: skip


def _images(output: str) -> set[str]:
    """Every container image in what ``helm install --dry-run=client`` printed."""
    manifest = output.partition("\nMANIFEST:\n")[2].partition("\nNOTES:\n")[0]
    assert manifest, output[:500]
    found = set()
    for document in Rendering.parse(manifest).documents:
        spec = (document.get("spec") or {}).get("template", {}).get("spec", {})
        found |= {c["image"] for c in spec.get("containers", [])}
    return found


def _install(helm: Helm, chart: str, *extra: str, ci_values: dict[str, Path]) -> str:
    done = helm.run(
        ["install", "proxima-agent", chart, *INSTALL, "-f", str(ci_values["quick-start"]), *extra]
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_release_is_the_project_version_everywhere(published: dict[str, Any]):
    assert published["version"] == contracts.VERSION
    with tarfile.open(published["chart_archive"]) as tar:
        member = tar.extractfile("proxima-agent/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert (chart["version"], chart["appVersion"]) == (contracts.VERSION, contracts.VERSION)
    assert published["image_tag"].endswith(f"/proxima/proxima-agent:{contracts.VERSION}")


def test_the_registry_holds_the_image_under_the_built_digest(
    published: dict[str, Any], oci_registry: OciRegistry, registry_auth: Path
):
    raw = subprocess.run(
        [
            "skopeo",
            "inspect",
            "--raw",
            "--tls-verify=false",
            "--authfile",
            str(registry_auth),
            f"docker://{published['image_tag']}",
        ],
        check=True,
        capture_output=True,
    ).stdout
    import hashlib

    assert "sha256:" + hashlib.sha256(raw).hexdigest() == published["image_digest"]
    manifest = json.loads(raw)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert len(manifest["layers"]) == 2  # the Debian base, the agent


def test_helm_install_from_the_oci_registry_pins_the_image_by_digest(
    published: dict[str, Any],
    oci_registry: OciRegistry,
    repo_users: RepoUsers,
    fresh_helm: Helm,
    ci_values,
):
    login = registry_login(fresh_helm, oci_registry.host, repo_users.deploy)
    assert login.returncode == 0, login.stderr
    rendered = _install(
        fresh_helm,
        f"oci://{oci_registry.host}/proxima/charts/proxima-agent",
        "--version",
        contracts.VERSION,
        "--plain-http",
        ci_values=ci_values,
    )
    assert _images(rendered) == {published["image"]}
    assert published["image"] == (
        f"{oci_registry.host}/proxima/proxima-agent@{published['image_digest']}"
    )


def test_helm_repo_add_then_install_proxima_agent_renders_the_same_pinned_image(
    published: dict[str, Any],
    helm_repo: ChartRepository,
    repo_users: RepoUsers,
    fresh_helm: Helm,
    ci_values,
):
    added = repo_add(fresh_helm, helm_repo.url, repo_users.deploy)
    assert added.returncode == 0, added.stderr
    assert fresh_helm.run(["repo", "update", "proxima"]).returncode == 0
    listed = fresh_helm.run(["search", "repo", "proxima/proxima-agent", "-o", "json"])
    assert json.loads(listed.stdout)[0]["version"] == contracts.VERSION
    rendered = _install(fresh_helm, "proxima/proxima-agent", ci_values=ci_values)
    assert _images(rendered) == {published["image"]}


def test_the_images_contents_are_listed_beside_the_chart(
    published: dict[str, Any], helm_repo: ChartRepository
):
    listed = (helm_repo.directory / f"proxima-agent-{contracts.VERSION}.contents.txt").read_text()
    assert published["image_digest"] in listed.splitlines()[0]
    assert any(line.startswith("python3.11 ") for line in listed.splitlines())
    assert f"proxima_fleet {contracts.VERSION}" in listed.splitlines()


def test_the_index_points_at_the_published_archive(
    published: dict[str, Any], helm_repo: ChartRepository, repo_users: RepoUsers
):
    served = httpx.get(f"{helm_repo.url}/index.yaml", auth=repo_users.deploy.auth)
    assert served.status_code == 200
    assert served.content == Path(published["index"]).read_bytes()  # the local copy
    index = yaml.safe_load(served.text)
    (entry,) = index["entries"]["proxima-agent"]
    assert entry["version"] == entry["appVersion"] == contracts.VERSION
    assert entry["digest"] == published["chart_sha256"]
    assert entry["urls"] == [f"{helm_repo.url}/proxima-agent-{contracts.VERSION}.tgz"]


def test_the_chart_carries_a_provenance_file_helm_verifies(
    published: dict[str, Any],
    release_key: Path,
    fresh_helm: Helm,
    helm_repo: ChartRepository,
    repo_users: RepoUsers,
    tmp_path: Path,
):
    keyring = helm_repo.directory / "proxima-release.gpg"
    assert keyring.is_file(), "the public key is published beside index.yaml"
    verified = fresh_helm.run(["verify", published["chart_archive"], "--keyring", str(keyring)])
    assert verified.returncode == 0, verified.stderr
    assert "Signed by: Proxima Release" in verified.stdout + verified.stderr
    # Pulled through the repository with --verify, as an operator would.
    assert repo_add(fresh_helm, helm_repo.url, repo_users.deploy).returncode == 0
    pulled = fresh_helm.run(
        [
            "pull",
            "proxima/proxima-agent",
            "--verify",
            "--keyring",
            str(keyring),
            "--destination",
            str(tmp_path),
        ]
    )
    assert pulled.returncode == 0, pulled.stderr
    # A tampered archive fails.
    tampered = tmp_path / "tampered" / Path(published["chart_archive"]).name
    tampered.parent.mkdir()
    tampered.write_bytes(Path(published["chart_archive"]).read_bytes() + b"\0")
    Path(str(tampered) + ".prov").write_bytes(Path(published["chart_provenance"]).read_bytes())
    refused = fresh_helm.run(["verify", str(tampered), "--keyring", str(keyring)])
    assert refused.returncode != 0


def _policy(tmp_path: Path, host: str, key: Path) -> Path:
    policy = {
        "default": [{"type": "reject"}],
        "transports": {
            "docker": {
                f"{host}/proxima/proxima-agent": [
                    {"type": "signedBy", "keyType": "GPGKeys", "keyPath": str(key)}
                ]
            },
            "oci": {"": [{"type": "insecureAcceptAnything"}]},
        },
    }
    path = tmp_path / f"policy-{key.stem}.json"
    path.write_text(json.dumps(policy))
    return path


def test_the_image_signature_verifies_with_the_release_key_and_not_another(
    published: dict[str, Any],
    oci_registry: OciRegistry,
    helm_repo: ChartRepository,
    repo_users: RepoUsers,
    registry_auth: Path,
    tmp_path: Path,
):
    assert published["image_signature"], "publish wrote no image signature"
    registries = tmp_path / "registries.d"
    registries.mkdir()
    # The lookaside is behind the repository's basic auth: the deploy token in the URL's
    # userinfo (a file, not argv), which Go's HTTP client sends as basic auth.
    user = repo_users.deploy
    lookaside = helm_repo.url.replace("://", f"://{user.username}:{user.password}@")
    (registries / "proxima.yaml").write_text(
        f"docker:\n  {oci_registry.host}:\n    lookaside: {lookaside}/signatures\n"
    )
    ref = f"docker://{oci_registry.host}/proxima/proxima-agent@{published['image_digest']}"

    def pull(key: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                # the policy is checked on reading; an oci: layout cannot store signatures
                "skopeo",
                "copy",
                "--quiet",
                "--remove-signatures",
                "--src-tls-verify=false",
                "--src-authfile",
                str(registry_auth),
                "--policy",
                str(_policy(tmp_path, oci_registry.host, key)),
                "--registries.d",
                str(registries),
                ref,
                f"oci:{tmp_path / key.stem}:v",
            ],
            capture_output=True,
            text=True,
        )

    good = pull(helm_repo.directory / "proxima-release.gpg")
    assert good.returncode == 0, good.stderr
    other_home = tmp_path / "other-gnupg"
    from testkit.release import run_release

    assert run_release("keygen", "--gpg-home", str(other_home)).returncode == 0
    bad = pull(other_home / "proxima-release.gpg")
    assert bad.returncode != 0
    assert "signature" in bad.stderr.lower()


def run_login(helm: Helm, script: str, user: Credentials) -> subprocess.CompletedProcess[str]:
    """The wizard's login block as written, in bash, the deploy token's name and password
    typed on its stdin (as ``read`` takes them from a terminal)."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        input=f"{user.username}\n{user.password}\n",
        env={**helm._env(), "PATH": f"{helm.binary.parent}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_wizards_commands_install_the_published_chart(
    published: dict[str, Any],
    oci_registry: OciRegistry,
    helm_repo: ChartRepository,
    repo_users: RepoUsers,
    helm_binary: Path,
    tmp_path: Path,
):
    """The onboarding wizard, its settings pointed at what `publish` printed
    (PROXIMA_CHART_REPO_URL, PROXIMA_CHART_REF), writes a login (the deploy token read by
    ``read -rs``, handed to helm on stdin) and commands that install the release."""
    import shlex

    from console.web.install_commands import InstallPlan

    oci_chart = f"oci://{oci_registry.host}/proxima/charts/proxima-agent"
    for chart, extra in (("proxima/proxima-agent", []), (oci_chart, ["--plain-http"])):
        helm = Helm(helm_binary, tmp_path / f"home-{len(extra)}")
        plan = InstallPlan(
            backend_url="https://console.example",
            install_token="pxi_example",
            cluster_name="prod",
            cluster_slug="prod",
            host_data_dir=None,
            chart_version=contracts.VERSION,
            chart=chart,
            repo_url=helm_repo.url,
        )
        login = plan.login_commands()
        assert login is not None and "--password-stdin" in login
        assert repo_users.deploy.password not in login
        # The test registry speaks plain HTTP (a real one, TLS: the page's command as is).
        script = login.replace("--password-stdin", "--password-stdin " + " ".join(extra))
        refused = run_login(helm, script, repo_users.deploy.wrong())
        assert refused.returncode != 0
        assert "401" in refused.stderr, refused.stderr
        logged_in = run_login(helm, script, repo_users.deploy)
        assert logged_in.returncode == 0, logged_in.stderr
        assert repo_users.deploy.password not in logged_in.stdout + logged_in.stderr
        words = shlex.split(plan.helm_command().replace("\\\n", " "))
        assert words[:3] == ["helm", "upgrade", "--install"]
        assert words[words.index("--version") + 1] == contracts.VERSION
        done = helm.run(["install", *words[3:], "--dry-run=client", *extra])
        assert done.returncode == 0, done.stderr
        assert _images(done.stdout) == {published["image"]}
        application = plan.argo_application()
        assert application is not None
        source = yaml.safe_load(application)["spec"]["source"]
        assert source["targetRevision"] == contracts.VERSION
        expected = (
            helm_repo.url if chart.startswith("proxima/") else f"{oci_registry.host}/proxima/charts"
        )
        assert (source["repoURL"], source["chart"]) == (expected, "proxima-agent")
