"""Build the proxima-agent OCI image without a container engine, reproducibly.

    base    mmdebstrap --variant=essential of the host's Debian suite, from the host's apt
            sources, with python3 and ca-certificates; the proxima user (UID/GID 65532), its
            data directory /var/lib/proxima-agent (0700) and nothing else writable by it but
            /tmp. Cached under <cache>/base-<key>/ by everything that defines it (the key).
    agent   /opt/proxima-agent: a venv of the base's python3 with the project wheel and the
            agent extra's wheels (pinned by docker/agent-constraints.txt), installed by pip run
            inside the base (chroot), byte-compiled with unchecked-hash pycs (a read-only root
            never writes __pycache__).

The OCI layout (oci-layout, index.json, blobs/sha256/…) is written here, in Python, rather than
by umoci: every byte is decided by this file (entries sorted, owners numeric, names empty,
mtimes clamped to SOURCE_DATE_EPOCH, gzip without a timestamp, JSON with sorted keys), so the
same inputs give the same digest; the tests unpack the result with umoci and pull it with
skopeo, which checks that it is a standard layout. Needs root (mmdebstrap's root mode and
chroot), as Debian's own image builds do.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "AGENT_HOME",
    "DATA_DIR",
    "ENTRYPOINT",
    "ENV",
    "UID",
    "BaseImage",
    "ImageError",
    "OciImage",
    "build_agent_layer",
    "build_base",
    "write_layout",
]

UID = 65532
DATA_DIR = "/var/lib/proxima-agent"
AGENT_HOME = "/opt/proxima-agent"
ENTRYPOINT = [f"{AGENT_HOME}/bin/proxima-agent"]
CMD = ["run"]
HEALTH_PORT = 8181
#: the image's environment; docker/agent.Dockerfile sets the same (a test compares them)
ENV = {
    "PATH": f"{AGENT_HOME}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "HOME": "/tmp",
    "PROXIMA_DATA_DIR": DATA_DIR,
    "PROXIMA_HEALTH_HOST": "0.0.0.0",
    "PROXIMA_HEALTH_PORT": str(HEALTH_PORT),
}
#: what the base is made of; changing any of it changes the cache key
BASE_VARIANT = "essential"
BASE_INCLUDE = ("python3", "ca-certificates")
BASE_EPOCH = 1704067200  # 2024-01-01: the base's own timestamps (its key names the packages)
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/lintian/*",
)
#: shell run by mmdebstrap with the root as $1, after the packages are installed
BASE_HOOKS = (
    # A runtime mounts its own; the host's copies would make the base differ between machines.
    ': > "$1/etc/hostname"; : > "$1/etc/resolv.conf"',
    'rm -f "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old',
    f"echo 'proxima:x:{UID}:{UID}:proxima-agent:/tmp:/usr/sbin/nologin' >> \"$1/etc/passwd\"",
    f"echo 'proxima:x:{UID}:' >> \"$1/etc/group\"",
    f'install -d -o {UID} -g {UID} -m 0700 "$1{DATA_DIR}"',
    # Only /tmp stays world-writable (the chart mounts an emptyDir there).
    'chmod 0755 "$1/var/tmp" "$1/run/lock"',
)
#: left out of the base layer: apt's leftovers (no apt in the image: nothing installs at run
#: time) and device nodes (a runtime makes /dev)
BASE_EXCLUDE = ("dev/", "etc/apt", "var/lib/apt", "var/cache/apt", "var/log/apt")
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
HOST_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
GZIP_LEVEL = 6
CHUNK = 1 << 20


class ImageError(RuntimeError):
    """One line saying why the image could not be built."""


def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run ``cmd``; its stdout, or ImageError with the tail of its output."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    except FileNotFoundError as exc:
        raise ImageError(f"{cmd[0]} is not installed ({exc.strerror})") from exc
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]
        raise ImageError(
            f"{' '.join(cmd[:3])} … failed (exit {done.returncode}): {' | '.join(tail)}"
        )
    return done.stdout


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# -- the Debian base -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaseImage:
    """A cached mmdebstrap tarball and what it contains."""

    tar: Path
    key: str
    suite: str
    packages: list[str]  # "name version", from the base's dpkg status


def host_suite() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    raise ImageError("cannot tell the host's Debian suite (no VERSION_CODENAME in /etc/os-release)")


def host_sources() -> Path:
    for path in HOST_SOURCES:
        if path.is_file() and path.read_text().strip():
            return path
    raise ImageError("no apt sources on this machine (/etc/apt/sources.list.d/debian.sources)")


def base_key(suite: str, sources: str, mmdebstrap_version: str) -> str:
    spec = {
        "suite": suite,
        "sources": sources,
        "mmdebstrap": mmdebstrap_version,
        "variant": BASE_VARIANT,
        "include": BASE_INCLUDE,
        "dpkg": DPKG_OPTIONS,
        "hooks": BASE_HOOKS,
        "exclude": BASE_EXCLUDE,
        "epoch": BASE_EPOCH,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _packages_of(tar_path: Path) -> list[str]:
    with tarfile.open(tar_path) as tar:
        member = tar.extractfile("./var/lib/dpkg/status")
        text = member.read().decode() if member else ""
    packages, name = [], ""
    for line in text.splitlines():
        if line.startswith("Package: "):
            name = line.split(": ", 1)[1]
        elif line.startswith("Version: ") and name:
            packages.append(f"{name} {line.split(': ', 1)[1]}")
    return sorted(packages)


def build_base(
    cache: Path, *, suite: str | None = None, sources: Path | None = None, refresh: bool = False
) -> BaseImage:
    """The cached base, built first when missing (or ``refresh``)."""
    suite = suite or host_suite()
    sources = sources or host_sources()
    version = run(["mmdebstrap", "--version"]).strip()
    key = base_key(suite, sources.read_text(), version)
    directory = cache / f"base-{key}"
    tar_path = directory / "rootfs.tar"
    if tar_path.is_file() and not refresh:
        return BaseImage(tar_path, key, suite, _packages_of(tar_path))
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / "rootfs.tar.partial"
    cmd = [
        "mmdebstrap",
        "--quiet",
        "--mode=root",
        f"--variant={BASE_VARIANT}",
        f"--include={','.join(BASE_INCLUDE)}",
        f"--hook-dir={MERGED_USR_HOOKS}",
        "--format=tar",
        *(f"--dpkgopt={option}" for option in DPKG_OPTIONS),
        *(f"--customize-hook={hook}" for hook in BASE_HOOKS),
        suite,
        str(partial),
        str(sources),
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(BASE_EPOCH), "LC_ALL": "C.UTF-8"}
    run(cmd, env=env)
    os.replace(partial, tar_path)
    base = BaseImage(tar_path, key, suite, _packages_of(tar_path))
    (directory / "packages.txt").write_text("\n".join(base.packages) + "\n")
    return base


# -- the agent layer -------------------------------------------------------------------------------


def build_agent_layer(
    base: BaseImage, wheels: Path, requirement: str, workdir: Path, epoch: int
) -> Path:
    """Install ``requirement`` (``proxima-fleet[agent]==V``) from ``wheels`` into a venv at
    /opt/proxima-agent inside a scratch copy of the base; the scratch root is returned."""
    root = workdir / "rootfs"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    run(["tar", "-xpf", str(base.tar), "--numeric-owner", "-C", str(root)])
    staged = root / "tmp" / "wheels"
    shutil.copytree(wheels, staged)
    pip = sorted(staged.glob("pip-*.whl"))
    if not pip:
        raise ImageError(f"no pip wheel in {wheels} (it installs the agent inside the base)")
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LC_ALL": "C.UTF-8",
        "SOURCE_DATE_EPOCH": str(epoch),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": "/tmp",
    }
    python = f"{AGENT_HOME}/bin/python"
    chroot = ["chroot", str(root)]
    run([*chroot, "/usr/bin/python3", "-m", "venv", "--without-pip", AGENT_HOME], env=env)
    run(
        [
            *chroot,
            python,
            f"/tmp/wheels/{pip[-1].name}/pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            "/tmp/wheels",
            "--no-compile",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            requirement,
        ],
        env=env,
    )
    run(
        [
            *chroot,
            python,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            f"{AGENT_HOME}/lib",
        ],
        env=env,
    )
    run([*chroot, f"{AGENT_HOME}/bin/proxima-agent", "--help"], env=env)
    shutil.rmtree(staged)
    return root


# -- layers: normalized tar + gzip -----------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    blob: Path  # gzip, named by its digest
    digest: str  # sha256:<hex> of the blob
    diff_id: str  # sha256:<hex> of the uncompressed tar
    size: int


def _normalize(info: tarfile.TarInfo, epoch: int) -> tarfile.TarInfo:
    info.name = info.name.removeprefix("./").rstrip("/")
    info.uname = info.gname = ""
    info.mtime = min(int(info.mtime), epoch)
    info.pax_headers = {}
    if info.islnk():
        info.linkname = info.linkname.removeprefix("./")
    return info


def _from_tar(source: Path, epoch: int) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    """The base tarball's entries, sorted, without device nodes (a runtime makes /dev)."""
    with tarfile.open(source) as tar:
        members = sorted(tar.getmembers(), key=lambda m: m.name.removeprefix("./").rstrip("/"))
        for member in members:
            name = member.name.removeprefix("./").rstrip("/")
            excluded = any(name == p or name.startswith(p.rstrip("/") + "/") for p in BASE_EXCLUDE)
            if not name or excluded or member.ischr() or member.isblk():
                continue
            data = None
            if member.isfile():
                handle = tar.extractfile(member)
                data = handle.read() if handle else b""
            yield _normalize(member, epoch), data


def _from_dir(
    root: Path, subtree: str, epoch: int
) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    """Every entry under ``root/subtree``, sorted by path, hard links kept as links."""
    paths = [root / subtree]
    for directory, dirs, files in os.walk(root / subtree):
        paths += [Path(directory) / name for name in dirs + files]
    inodes: dict[tuple[int, int], str] = {}
    for path in sorted(paths, key=lambda p: str(p.relative_to(root))):
        name = str(path.relative_to(root))
        stat = path.lstat()
        info = tarfile.TarInfo(name)
        info.mode, info.uid, info.gid = stat.st_mode & 0o7777, stat.st_uid, stat.st_gid
        data = None
        key = (stat.st_dev, stat.st_ino)
        if path.is_symlink():
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
        elif path.is_dir():
            info.type = tarfile.DIRTYPE
        elif stat.st_nlink > 1 and key in inodes:
            info.type, info.linkname = tarfile.LNKTYPE, inodes[key]
        elif path.is_file():
            inodes[key] = name
            data = path.read_bytes()
            info.size = len(data)
        else:
            raise ImageError(f"{name}: not a file, directory or link")
        info.mtime = epoch
        yield _normalize(info, epoch), data


def write_layer(entries: Iterator[tuple[tarfile.TarInfo, bytes | None]], blobs: Path) -> Layer:
    blobs.mkdir(parents=True, exist_ok=True)
    fd, tmp_tar = tempfile.mkstemp(dir=blobs, prefix=".layer-", suffix=".tar")
    os.close(fd)
    tar_path, gz_path = Path(tmp_tar), Path(tmp_tar + ".gz")
    try:
        with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
            for info, data in entries:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        diff_id = sha256_file(tar_path)
        with open(tar_path, "rb") as raw, open(gz_path, "wb") as out:
            # no name, mtime 0: the gzip header carries nothing of this machine or moment
            with gzip.GzipFile(
                filename="", mode="wb", fileobj=out, compresslevel=GZIP_LEVEL, mtime=0
            ) as gz:
                shutil.copyfileobj(raw, gz, CHUNK)
        digest = sha256_file(gz_path)
        target = blobs / digest
        os.replace(gz_path, target)
        return Layer(target, f"sha256:{digest}", f"sha256:{diff_id}", target.stat().st_size)
    finally:
        tar_path.unlink(missing_ok=True)
        gz_path.unlink(missing_ok=True)


def base_layer(base: BaseImage, blobs: Path) -> Layer:
    """The base as a layer (mtimes clamped to BASE_EPOCH: it depends on the base alone), made
    once per base and kept beside it; linked into ``blobs``."""
    record = base.tar.parent / "layer.json"
    if record.is_file():
        saved = json.loads(record.read_text())
        cached = base.tar.parent / saved["digest"].removeprefix("sha256:")
        if cached.is_file():
            target = blobs / cached.name
            shutil.copyfile(cached, target)
            return Layer(target, saved["digest"], saved["diff_id"], saved["size"])
    layer = write_layer(_from_tar(base.tar, BASE_EPOCH), base.tar.parent)
    record.write_text(
        json.dumps({"digest": layer.digest, "diff_id": layer.diff_id, "size": layer.size})
    )
    return base_layer(base, blobs)


# -- the OCI layout --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OciImage:
    layout: Path
    tag: str
    digest: str  # of the manifest
    size: int  # compressed: config + layers
    layers: list[Layer] = field(default_factory=list)


def _blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def image_config(
    diff_ids: list[str], labels: dict[str, str], history: list[str], epoch: int
) -> dict[str, object]:
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{UID}:{UID}",
            "Env": [f"{k}={v}" for k, v in ENV.items()],
            "Entrypoint": ENTRYPOINT,
            "Cmd": CMD,
            "WorkingDir": DATA_DIR,
            "ExposedPorts": {f"{HEALTH_PORT}/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": created, "created_by": step} for step in history],
    }


def write_layout(
    out: Path,
    base: BaseImage,
    agent_root: Path,
    *,
    tag: str,
    labels: dict[str, str],
    history: list[str],
    epoch: int,
) -> OciImage:
    """An OCI image layout at ``out`` (replaced) with the base and agent layers, tagged ``tag``."""
    shutil.rmtree(out, ignore_errors=True)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layers = [
        base_layer(base, blobs),
        write_layer(_from_dir(agent_root, AGENT_HOME.lstrip("/"), epoch), blobs),
    ]
    config = image_config([layer.diff_id for layer in layers], labels, history, epoch)
    config_digest, config_size = _blob(blobs, _json(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [
            {"mediaType": OCI_LAYER, "digest": layer.digest, "size": layer.size} for layer in layers
        ],
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers")},
    }
    manifest_digest, manifest_size = _blob(blobs, _json(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (out / "index.json").write_bytes(_json(index))
    (out / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    size = config_size + sum(layer.size for layer in layers)
    return OciImage(out, tag, manifest_digest, size, layers)
