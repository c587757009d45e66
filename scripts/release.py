#!/usr/bin/env python3
"""Cut a release: the agent image and the Helm chart, versioned from one place, published to an
OCI registry and a classic Helm repository (both wanting credentials), signed, and listed.

    python scripts/release.py version                  # the version: contracts.VERSION
    python scripts/release.py set-version 0.9.0        # writes contracts.VERSION and Chart.yaml
    python scripts/release.py lock                     # re-pins docker/agent-constraints.txt
    python scripts/release.py keygen --gpg-home DIR    # a GPG release key (no passphrase)
    python scripts/release.py image [--out dist/release] [--json]
    python scripts/release.py publish --registry HOST:PORT [--plain-http]
        --repo-url URL [--repo-dir DIR] [--pull-registry HOST] [--gpg-home DIR | --no-sign] [--json]

The version lives in ``contracts/__init__.py`` (``VERSION``); ``pyproject.toml`` reads it from
there, the chart is packaged with ``--version``/``--app-version`` set to it (Chart.yaml's copy
is held equal by a test and rewritten by ``set-version``), and the image is tagged with it. When
HEAD carries a ``v*`` tag it must name the same version, and Chart.yaml's version/appVersion
must be it too: ``publish`` refuses otherwise.

``image`` builds the agent image without a container engine (see scripts/oci_image.py): a
Debian base made by mmdebstrap from this machine's apt sources (cached under
``<cache>/base-<key>``), the project wheel and its pinned dependencies in a venv at
/opt/proxima-agent, UID 65532. Same inputs, same digest: timestamps come from
``SOURCE_DATE_EPOCH`` (default: HEAD's commit time).

``publish`` also packages the chart with the image pinned by digest in its values, logs in to
the registry (``helm registry login --password-stdin``) and pushes the image (skopeo) and the
chart (helm push), uploads the archive and an ``index.yaml`` merged with the repository's to
the classic repository (HTTP PUT, basic auth; scripts/release_repos.py; ``<repo-dir>`` keeps
a copy), and signs: the chart with a Helm provenance file
(``helm package --sign``, GPG) and the image with a containers "simple signing" GPG signature
(``skopeo copy --sign-by``) stored under ``<repo-dir>/signatures`` (the lookaside served with
the repository). docs/releasing.md says how to verify both.

Environment: PROXIMA_RELEASE_REGISTRY_USERNAME/_PASSWORD and PROXIMA_RELEASE_REPO_USERNAME/
_PASSWORD (or _PASSWORD_FILE; credentials are never taken from argv), PROXIMA_RELEASE_CACHE
(default <repo>/.cache/release), PROXIMA_TOOLS_CACHE (helm).
Needs root, mmdebstrap, skopeo and gpg (scripts/dev.py installs them). Exit status 0 on
success; on failure one line ``release: error: …`` on stderr and status 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
CHART = ROOT / "chart" / "proxima-agent"
CONSTRAINTS = ROOT / "docker" / "agent-constraints.txt"
VERSION_FILE = ROOT / "contracts" / "__init__.py"
IMAGE_NAME = "proxima/proxima-agent"
CHART_NAMESPACE = "proxima/charts"
DEFAULT_IMAGE_REPOSITORY = "registry.prxm.uz/proxima/proxima-agent"
GPG_UID = "Proxima Release <release@proxima.invalid>"
_VERSION_LINE = re.compile(r'^VERSION = "([^"]+)"$', re.M)
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")


class ReleaseError(Exception):
    """One line saying why the release stopped."""


def _load(name: str) -> ModuleType:
    key = f"proxima_scripts_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


oci_image = _load("oci_image")
repos = _load("release_repos")


_STARTED = time.monotonic()


def say(message: str) -> None:
    elapsed = time.monotonic() - _STARTED
    print(f"release: [{elapsed:5.0f}s] {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kwargs: Any) -> str:
    try:
        return str(oci_image.run([str(c) for c in cmd], **kwargs))
    except oci_image.ImageError as exc:
        raise ReleaseError(str(exc)) from exc


# -- the version -----------------------------------------------------------------------------------


def project_version() -> str:
    found = _VERSION_LINE.search(VERSION_FILE.read_text())
    if not found:
        raise ReleaseError(f'{VERSION_FILE} has no line VERSION = "x.y.z"')
    return found[1]


def release_version() -> str:
    """contracts.VERSION, checked against a ``v*`` tag on HEAD when there is one."""
    version = project_version()
    if not _SEMVER.match(version):
        raise ReleaseError(f"VERSION {version!r} is not semver (Helm needs x.y.z)")
    tags = subprocess.run(
        ["git", "tag", "--points-at", "HEAD", "--list", "v*"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if tags and f"v{version}" not in tags:
        raise ReleaseError(f"HEAD is tagged {', '.join(tags)} but VERSION is {version}")
    chart = (CHART / "Chart.yaml").read_text()
    for key in ("version", "appVersion"):
        found = re.search(rf"^{key}: \"?([^\"\n]+)\"?$", chart, re.M)
        if not found or found[1] != version:
            raise ReleaseError(
                f"Chart.yaml's {key} is {found[1] if found else 'missing'} but VERSION is "
                f"{version} (`release.py set-version {version}` writes both)"
            )
    return version


def set_version(version: str) -> None:
    if not _SEMVER.match(version):
        raise ReleaseError(f"{version!r} is not semver (x.y.z)")
    VERSION_FILE.write_text(_VERSION_LINE.sub(f'VERSION = "{version}"', VERSION_FILE.read_text()))
    chart = CHART / "Chart.yaml"
    text = re.sub(r"^version: .*$", f"version: {version}", chart.read_text(), flags=re.M)
    chart.write_text(re.sub(r"^appVersion: .*$", f'appVersion: "{version}"', text, flags=re.M))


def source_date_epoch() -> int:
    configured = os.environ.get("SOURCE_DATE_EPOCH")
    if configured:
        return int(configured)
    out = subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not out:
        raise ReleaseError("set SOURCE_DATE_EPOCH (no git history to take HEAD's time from)")
    return int(out)


def git_revision() -> str:
    return (
        subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
        or "unknown"
    )


def cache_dir() -> Path:
    return Path(os.environ.get("PROXIMA_RELEASE_CACHE") or ROOT / ".cache" / "release")


# -- wheels ----------------------------------------------------------------------------------------


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"]


def _stage_source(into: Path) -> Path:
    """What the Dockerfile copies: pyproject.toml, README.md and the tracked contracts/ and
    agent/ files (so the wheel carries nothing else)."""
    stage = into / "src"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    files = run(["git", "ls-files", "contracts", "agent"], cwd=ROOT).split()
    for name in ["pyproject.toml", "README.md", *files]:
        target = stage / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return stage


def dependency_wheels() -> Path:
    """The agent extra's wheels and pip's, pinned by the constraints file; cached by its hash."""
    key = oci_image.hashlib.sha256(
        CONSTRAINTS.read_bytes() + f"{sys.version_info[:2]}".encode()
    ).hexdigest()[:16]
    directory = cache_dir() / f"wheels-{key}"
    if (directory / ".complete").is_file():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pins = [line for line in CONSTRAINTS.read_text().splitlines() if "==" in line]
    say(f"fetching {len(pins)} pinned wheels (cached afterwards in {directory})")
    run(_pip("wheel", "--wheel-dir", str(directory), "--no-deps", *pins))
    (directory / ".complete").write_text("\n".join(pins) + "\n")
    return directory


def project_wheel(workdir: Path) -> Path:
    stage = _stage_source(workdir)
    out = workdir / "project-wheel"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())}
    run(_pip("wheel", "--no-deps", "--wheel-dir", str(out), str(stage)), env=env)
    return next(out.glob("proxima_fleet-*.whl"))


def lock() -> list[str]:
    """Resolve ``proxima-fleet[agent]`` afresh and write every pin to the constraints file."""
    with tempfile.TemporaryDirectory() as tmp:
        stage = _stage_source(Path(tmp))
        wheels = Path(tmp) / "wheels"
        run(_pip("wheel", "--wheel-dir", str(wheels), f"{stage}[agent]"))
        pip_version = run([sys.executable, "-m", "pip", "--version"]).split()[1]
        pins = {f"pip=={pip_version}"}
        for wheel in wheels.glob("*.whl"):
            name, version = wheel.name.split("-")[:2]
            if name != "proxima_fleet":
                pins.add(f"{name.lower().replace('_', '-')}=={version}")
    lines = sorted(pins)
    header = (
        "# Every package in the agent image (besides the project), pinned: scripts/release.py\n"
        "# builds the image from exactly these, and docker/agent.Dockerfile installs with them\n"
        "# as constraints. Regenerate with `python scripts/release.py lock`.\n"
    )
    CONSTRAINTS.write_text(header + "\n".join(lines) + "\n")
    return lines


# -- the image -------------------------------------------------------------------------------------


@dataclass
class ImageResult:
    layout: str
    tag: str
    digest: str
    size: int
    base_key: str
    packages: list[str]
    python_packages: list[str]
    seconds: float


def build_image(out: Path, *, refresh_base: bool = False) -> ImageResult:
    started = time.monotonic()
    version = release_version()
    epoch = source_date_epoch()
    say("Debian base (mmdebstrap; cached by its definition)")
    base = oci_image.build_base(cache_dir(), refresh=refresh_base)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        work = Path(tmp)
        wheels = work / "wheels"
        shutil.copytree(dependency_wheels(), wheels)
        shutil.copy2(project_wheel(work), wheels)
        say("installing the agent into the image (pip inside the base)")
        root = oci_image.build_agent_layer(
            base, wheels, f"proxima-fleet[agent]=={version}", work, epoch
        )
        python_packages = _installed(root)
        labels = {
            "org.opencontainers.image.title": "proxima-agent",
            "org.opencontainers.image.description": "Proxima fleet agent: host, Kubernetes node "
            "monitor and cluster collector",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.revision": git_revision(),
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.source": "https://gitlab.prxm.uz",
            "org.opencontainers.image.base.name": f"debian:{base.suite} (mmdebstrap "
            f"{oci_image.BASE_VARIANT}, base {base.key})",
        }
        history = [
            f"mmdebstrap --variant={oci_image.BASE_VARIANT} "
            f"--include={','.join(oci_image.BASE_INCLUDE)} {base.suite} (base {base.key})",
            f"pip install proxima-fleet[agent]=={version} into {oci_image.AGENT_HOME}",
        ]
        say("writing the OCI layout")
        image = oci_image.write_layout(
            out, base, root, tag=version, labels=labels, history=history, epoch=epoch
        )
    return ImageResult(
        str(image.layout),
        image.tag,
        image.digest,
        image.size,
        base.key,
        base.packages,
        python_packages,
        round(time.monotonic() - started, 1),
    )


def _installed(root: Path) -> list[str]:
    site = next((root / oci_image.AGENT_HOME.lstrip("/") / "lib").glob("python3*/site-packages"))
    found = []
    for meta in sorted(site.glob("*.dist-info")):
        name, version = meta.name.removesuffix(".dist-info").rsplit("-", 1)
        found.append(f"{name} {version}")
    return found


# -- the chart -------------------------------------------------------------------------------------


def pin_values(values: str, repository: str, digest: str) -> str:
    """values.yaml with both agents' image repository and digest set (a digest wins over the
    tag in the chart's image helper)."""
    old_repo = f"    repository: {DEFAULT_IMAGE_REPOSITORY}\n"
    old_digest = '    digest: ""\n'
    if values.count(old_repo) != 2 or values.count(old_digest) != 2:
        raise ReleaseError("values.yaml no longer has two image blocks to pin (repository, digest)")
    values = values.replace(old_repo, f"    repository: {repository}\n")
    return values.replace(old_digest, f'    digest: "{digest}"\n')


def helm_binary() -> Path:
    tools = _load("tools")
    try:
        return Path(tools.ensure_tool("helm").path)
    except tools.ToolError as exc:
        raise ReleaseError(str(exc)) from exc


def package_chart(
    workdir: Path, version: str, repository: str, digest: str, gpg_home: Path | None
) -> Path:
    chart = workdir / "chart" / "proxima-agent"
    shutil.rmtree(chart.parent, ignore_errors=True)
    shutil.copytree(CHART, chart)
    values = chart / "values.yaml"
    values.write_text(pin_values(values.read_text(), repository, digest))
    out = workdir / "packaged"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        helm_binary(),
        "package",
        chart,
        "--version",
        version,
        "--app-version",
        version,
        "--destination",
        out,
    ]
    if gpg_home is not None:
        cmd += ["--sign", "--key", GPG_UID, "--keyring", gpg_home / "secring.gpg"]
    run(cmd)
    return out / f"proxima-agent-{version}.tgz"


# -- signing (GPG) ---------------------------------------------------------------------------------


def keygen(gpg_home: Path) -> str:
    """A passphrase-less RSA signing key in ``gpg_home`` (Helm reads RSA, not EdDSA), exported
    as the legacy secring.gpg Helm signs with and the public keyring anyone verifies with."""
    gpg_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    gpg = [
        "gpg",
        "--homedir",
        str(gpg_home),
        "--batch",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
    ]
    try:
        run([*gpg, "--quick-gen-key", GPG_UID, "rsa3072", "sign", "never"])
        fpr = fingerprint(gpg_home)
        (gpg_home / "secring.gpg").write_bytes(
            subprocess.run(
                [*gpg, "--export-secret-keys", fpr], capture_output=True, check=True
            ).stdout
        )
        os.chmod(gpg_home / "secring.gpg", 0o600)
        export_public_key(gpg_home, gpg_home / "proxima-release.gpg")
    finally:
        stop_gpg_agent(gpg_home)
    return fpr


def fingerprint(gpg_home: Path) -> str:
    out = run(
        [
            "gpg",
            "--homedir",
            str(gpg_home),
            "--batch",
            "--with-colons",
            "--list-secret-keys",
            GPG_UID,
        ]
    )
    for line in out.splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    raise ReleaseError(f"no secret key {GPG_UID!r} in {gpg_home}")


def export_public_key(gpg_home: Path, target: Path) -> None:
    data = subprocess.run(
        ["gpg", "--homedir", str(gpg_home), "--batch", "--export", GPG_UID],
        capture_output=True,
        check=True,
    ).stdout
    target.write_bytes(data)


def stop_gpg_agent(gpg_home: Path) -> None:
    subprocess.run(
        ["gpgconf", "--homedir", str(gpg_home), "--kill", "all"], capture_output=True, check=False
    )


# -- publishing ------------------------------------------------------------------------------------


@dataclass
class Published:
    version: str
    image: str  # repo@digest, as the chart pins it
    image_tag: str
    image_digest: str
    image_size: int
    chart_oci: str
    chart_digest: str
    chart_archive: str
    chart_sha256: str
    index: str
    repo_url: str
    signed: bool
    chart_provenance: str | None
    image_signature: str | None
    public_key: str | None
    build: ImageResult


def registries_d(workdir: Path, registry: str, repo_dir: Path) -> Path:
    """containers-registries.d(5): skopeo writes the image signature into ``repo_dir``."""
    directory = workdir / "registries.d"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "proxima-release.yaml").write_text(
        f"docker:\n  {registry}:\n    lookaside-staging: file://{repo_dir / 'signatures'}\n"
    )
    return directory


def push_image(
    layout: Path,
    tag: str,
    target: str,
    *,
    plain_http: bool,
    workdir: Path,
    registry: str,
    repo_dir: Path,
    gpg_home: Path | None,
    authfile: Path,
) -> None:
    cmd = [
        "skopeo",
        "copy",
        "--quiet",
        "--preserve-digests",
        "--retry-times",
        "2",
        f"--dest-tls-verify={'false' if plain_http else 'true'}",
        "--dest-authfile",
        str(authfile),
    ]
    env = dict(os.environ)
    if gpg_home is not None:
        env["GNUPGHOME"] = str(gpg_home)
        cmd += [
            "--sign-by",
            fingerprint(gpg_home),
            "--registries.d",
            str(registries_d(workdir, registry, repo_dir)),
        ]
    try:
        run([*cmd, f"oci:{layout}:{tag}", f"docker://{target}"], env=env)
    finally:
        if gpg_home is not None:
            stop_gpg_agent(gpg_home)


def pushed_digest(ref: str, plain_http: bool, authfile: Path) -> str:
    raw = run(
        [
            "skopeo",
            "inspect",
            "--raw",
            f"--tls-verify={'false' if plain_http else 'true'}",
            "--authfile",
            str(authfile),
            f"docker://{ref}",
        ]
    )
    return "sha256:" + oci_image.hashlib.sha256(raw.encode()).hexdigest()


def push_chart(archive: Path, registry: str, plain_http: bool, authfile: Path) -> str:
    cmd = [helm_binary(), "push", archive, f"oci://{registry}/{CHART_NAMESPACE}"]
    cmd += ["--registry-config", authfile]
    done = subprocess.run(
        [str(c) for c in cmd + (["--plain-http"] if plain_http else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ReleaseError(f"helm push failed: {done.stderr.strip().splitlines()[-1:]}")
    found = re.search(r"Digest:\s*(sha256:[0-9a-f]{64})", done.stdout + done.stderr)
    if not found:
        raise ReleaseError("helm push printed no digest")
    return found[1]


def publish(args: argparse.Namespace) -> Published:
    version = release_version()
    signing = None if args.no_sign else Path(args.gpg_home)
    if signing is not None and not (signing / "secring.gpg").is_file():
        raise ReleaseError(
            f"no release key in {signing}: run `release.py keygen --gpg-home "
            f"{signing}` (or pass --no-sign)"
        )
    registry_creds = repos.credentials(repos.REGISTRY_ENV, f"the registry {args.registry}")
    repo_creds = repos.credentials(repos.REPO_ENV, f"the Helm repository {args.repo_url}")
    out = Path(args.out)
    authfile = out / "auth" / "registry.json"
    say(f"logging in to {args.registry} (helm registry login --password-stdin)")
    try:
        repos.registry_login(
            helm_binary(), args.registry, registry_creds, authfile, plain_http=args.plain_http
        )
        say(f"reading {args.repo_url}/index.yaml with the repository's credentials")
        repos.fetch_index(args.repo_url, repo_creds)  # a refused login stops before the build
        return _publish(args, version, signing, authfile, repo_creds)
    finally:
        authfile.unlink(missing_ok=True)


def _publish(
    args: argparse.Namespace, version: str, signing: Path | None, authfile: Path, repo_creds: Any
) -> Published:
    out = Path(args.out)
    image = build_image(out / "oci", refresh_base=args.refresh_base)
    repo_dir = Path(args.repo_dir or out / "repo")
    repo_dir.mkdir(parents=True, exist_ok=True)
    target = f"{args.registry}/{IMAGE_NAME}:{version}"
    say(f"pushing the image to {target}")
    push_image(
        Path(image.layout),
        version,
        target,
        plain_http=args.plain_http,
        workdir=out,
        registry=args.registry,
        repo_dir=repo_dir,
        gpg_home=signing,
        authfile=authfile,
    )
    if pushed_digest(target, args.plain_http, authfile) != image.digest:
        raise ReleaseError(f"the registry holds {target} under another digest than the build's")
    pull_repository = f"{args.pull_registry or args.registry}/{IMAGE_NAME}"
    archive = package_chart(out, version, pull_repository, image.digest, signing)
    say(f"pushing the chart to oci://{args.registry}/{CHART_NAMESPACE}")
    chart_digest = push_chart(archive, args.registry, args.plain_http, authfile)
    for path in [archive, archive.with_name(archive.name + ".prov")]:
        if path.is_file():
            shutil.copy2(path, repo_dir / path.name)
    write_contents(repo_dir / f"proxima-agent-{version}.contents.txt", image)
    public_key = None
    if signing is not None:
        public_key = repo_dir / "proxima-release.gpg"
        export_public_key(signing, public_key)
    say(f"uploading to {args.repo_url} (index.yaml merged with the repository's, last)")
    repos.publish_repo(helm_binary(), repo_dir, args.repo_url, version, repo_creds)
    published_archive = repo_dir / archive.name
    signature = _signature_path(repo_dir, image.digest) if signing is not None else None
    return Published(
        version=version,
        image=f"{pull_repository}@{image.digest}",
        image_tag=target,
        image_digest=image.digest,
        image_size=image.size,
        chart_oci=f"oci://{args.registry}/{CHART_NAMESPACE}/proxima-agent:{version}",
        chart_digest=chart_digest,
        chart_archive=str(published_archive),
        chart_sha256=oci_image.sha256_file(published_archive),
        index=str(repo_dir / "index.yaml"),
        repo_url=args.repo_url,
        signed=signing is not None,
        chart_provenance=str(published_archive) + ".prov" if signing is not None else None,
        image_signature=str(signature) if signature else None,
        public_key=str(public_key) if public_key else None,
        build=image,
    )


def write_contents(target: Path, image: ImageResult) -> None:
    """What the image holds, beside the chart: its digest, Debian's packages, the venv's."""
    lines = [f"# proxima-agent {image.tag} {image.digest}", "# debian (dpkg)"]
    lines += image.packages
    lines += ["# python (/opt/proxima-agent)", *image.python_packages]
    target.write_text("\n".join(lines) + "\n")


def _signature_path(repo_dir: Path, digest: str) -> Path | None:
    found = sorted((repo_dir / "signatures").glob(f"{IMAGE_NAME}@{digest.replace(':', '=')}/*"))
    return found[-1] if found else None


# -- the command line ------------------------------------------------------------------------------


def _report(published: Published) -> str:
    lines = [
        f"proxima-agent {published.version} published",
        f"  image   {published.image_tag}",
        f"          {published.image}  ({published.image_size / 1e6:.1f} MB compressed)",
        f"  chart   {published.chart_oci}@{published.chart_digest}",
        f"  repo    {published.repo_url}  (index {published.index})",
        f"          {Path(published.chart_archive).name} sha256:{published.chart_sha256}",
    ]
    if published.signed:
        lines += [
            f"  signed  chart provenance {published.chart_provenance}",
            f"          image signature {published.image_signature}",
            f"          public key {published.public_key}",
        ]
    else:
        lines.append("  signed  no (--no-sign)")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="release", description=__doc__.splitlines()[0])
    verbs = top.add_subparsers(dest="verb", required=True)
    verbs.add_parser("version", help="print the version (contracts.VERSION)")
    setv = verbs.add_parser("set-version", help="write a new version into its one place")
    setv.add_argument("new_version")
    verbs.add_parser("lock", help="re-pin docker/agent-constraints.txt")
    key = verbs.add_parser("keygen", help="make a GPG release key")
    key.add_argument("--gpg-home", required=True)
    img = verbs.add_parser("image", help="build the agent image (OCI layout)")
    img.add_argument("--out", default=str(ROOT / "dist" / "release" / "oci"))
    img.add_argument("--refresh-base", action="store_true", help="rebuild the cached base")
    img.add_argument("--json", action="store_true")
    pub = verbs.add_parser("publish", help="build, package, push, index, sign")
    pub.add_argument("--registry", required=True, help="HOST[:PORT] of the OCI registry")
    pub.add_argument("--plain-http", action="store_true", help="the registry speaks HTTP")
    pub.add_argument("--pull-registry", help="HOST[:PORT] clusters pull from (default: --registry)")
    pub.add_argument(
        "--repo-url", required=True, help="the classic Helm repository (takes HTTP PUT uploads)"
    )
    pub.add_argument("--repo-dir", help="local copy of what is uploaded (default: OUT/repo)")
    pub.add_argument("--gpg-home", default=os.environ.get("PROXIMA_RELEASE_GPG_HOME", ""))
    pub.add_argument("--no-sign", action="store_true")
    pub.add_argument("--out", default=str(ROOT / "dist" / "release"))
    pub.add_argument("--refresh-base", action="store_true")
    pub.add_argument("--json", action="store_true")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.verb == "version":
            print(release_version())
        elif args.verb == "set-version":
            set_version(args.new_version)
        elif args.verb == "lock":
            print("\n".join(lock()))
        elif args.verb == "keygen":
            print(keygen(Path(args.gpg_home)))
        elif args.verb == "image":
            result = build_image(Path(args.out), refresh_base=args.refresh_base)
            print(
                json.dumps(asdict(result), indent=2)
                if args.json
                else f"{result.layout}:{result.tag} {result.digest} ({result.seconds}s)"
            )
        elif args.verb == "publish":
            if not args.no_sign and not args.gpg_home:
                raise ReleaseError("pass --gpg-home DIR (a release key) or --no-sign")
            published = publish(args)
            print(json.dumps(asdict(published), indent=2) if args.json else _report(published))
    except (ReleaseError, repos.RepoError, oci_image.ImageError, OSError) as exc:
        print(f"release: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
