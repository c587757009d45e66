#!/usr/bin/env python3
"""Set up a fresh machine (only Python 3.11+ and pip needed) and run the project's jobs.

    python3 scripts/dev.py demo    # set up, then run a local fleet (the main job)
    python3 scripts/dev.py test    # set up, then lint, type-check and run the whole test suite

Stdlib only: this runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / "bin"
PY = BIN / "python"
STAMP = VENV / ".proxima-installed"


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def run(*cmd: str | Path, env: dict[str, str] | None = None, check: bool = True) -> int:
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env)
    if check and proc.returncode != 0:
        print(
            f"dev.py: {' '.join(str(c) for c in cmd)} failed with exit code {proc.returncode}",
            file=sys.stderr,
        )
        sys.exit(proc.returncode or 1)
    return proc.returncode


def setup() -> None:
    if sys.version_info < (3, 11):
        sys.exit("dev.py: Python 3.11 or newer is needed")
    if not PY.exists():
        say(f"creating virtual environment in {VENV.relative_to(ROOT)}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    say("installing the project with its pinned dependencies (first run takes a minute)")
    run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PY, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    STAMP.write_text(digest)


def apt_install(*packages: str) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print(
            f"dev.py: install the Debian packages {' '.join(packages)} (needs root)",
            file=sys.stderr,
        )
        return
    say(f"installing Debian packages: {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if run("apt-get", "install", "-y", "-qq", *packages, env=env, check=False) != 0:
        run("apt-get", "update", "-qq", env=env)
        run("apt-get", "install", "-y", "-qq", *packages, env=env)


def ensure_postgres() -> bool:
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        apt_install("postgresql")
    return bool(list(Path("/usr/lib/postgresql").glob("*/bin/initdb")))


def ensure_chromium() -> None:
    """Debian's Chromium for the web UI tests (Playwright drives it; it never downloads one)."""
    if not Path("/usr/bin/chromium").exists():
        apt_install("chromium")


#: Debian packages of the release lane (tests/release, scripts/release.py): the OCI registry,
#: image copy/unpack/run, the base image builder, the signer, and the authenticated classic
#: Helm repository (nginx with auth_basic and WebDAV PUT; htpasswd writes bcrypt users for it
#: and the registry); binary -> package
RELEASE_TOOLS = {
    "docker-registry": "docker-registry",
    "skopeo": "skopeo",
    "umoci": "umoci",
    "mmdebstrap": "mmdebstrap",
    "crun": "crun",
    "gpg": "gpg",
    "nginx": "nginx",
    "htpasswd": "apache2-utils",
}


def ensure_release_tools() -> None:
    """Debian's registry, skopeo, umoci, mmdebstrap, crun, gpg, nginx and htpasswd for the
    release lane (it fails under CI=true without them). The tests run nginx with a config of
    their own on 127.0.0.1; the package's default site, where Debian starts it, is not used."""
    missing = [pkg for tool, pkg in RELEASE_TOOLS.items() if not shutil.which(tool)]
    if missing:
        apt_install(*missing)


def ensure_control_plane() -> None:
    """Build (once, cached by version) the Kubernetes control plane the tests/cluster lane runs:
    from source through the Go module proxy, so a cold build takes a while; progress shows.
    A failure is reported here and again, with the reason, by the lane (fails under CI=true)."""
    say("Kubernetes control plane for tests/cluster (scripts/tools.py control-plane)")
    code = run(PY, ROOT / "scripts" / "tools.py", "control-plane", check=False)
    if code != 0:
        say("the control plane is not available: tests/cluster will say why")


def test(pytest_args: list[str]) -> int:
    setup()
    ensure_chromium()
    ensure_release_tools()
    ensure_control_plane()
    # The package index is reachable (setup just used it): run the self-contained build test too.
    env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PROXIMA_TEST_SELF_CONTAINED": "1",
    }
    # The release lane's Debian base and wheels (tests/release) are cached in the repo's own
    # .cache/release (keyed by content); set PROXIMA_RELEASE_CACHE to share them between clones.
    if ensure_postgres():
        env["PROXIMA_REQUIRE_POSTGRES"] = "1"
    else:
        say("PostgreSQL is not available: the postgres lane will be skipped")
    say("ruff")
    run(BIN / "ruff", "check", ".")
    run(BIN / "ruff", "format", "--check", ".")
    say("mypy (strict on contracts/ and rollout_policy/)")
    run(BIN / "mypy", "contracts", "rollout_policy", "console", "agent", "flows", "testkit")
    say("import-linter (layer rules from DESIGN.md)")
    run(BIN / "lint-imports")
    say("pytest")
    junit = ROOT / ".cache" / "pytest-results.xml"
    junit.unlink(missing_ok=True)
    code = run(BIN / "pytest", f"--junitxml={junit}", *pytest_args, env=env, check=False)
    if code != 0:
        # Libraries can print pages at interpreter exit (after pytest's own summary), and CI
        # keeps only the tail: name what failed once more, as the very last lines.
        for line in failed_tests(junit):
            print(f"dev.py: {line}", file=sys.stderr)
        print(f"dev.py: tests failed (pytest exit code {code})", file=sys.stderr)
    return code


def failed_tests(junit: Path, limit: int = 40) -> list[str]:
    """One line per failed or errored test in pytest's JUnit XML (its first message line)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as exc:
        return [f"no test report to summarise ({exc})"]
    lines = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            bad = case.find(kind)
            if bad is None:
                continue
            message = (bad.get("message") or "").strip().splitlines()
            where = f"{case.get('classname', '')}::{case.get('name', '')}"
            lines.append(f"{kind.upper()} {where} - {message[0][:200] if message else ''}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
    return lines


def demo(args: list[str]) -> int:
    setup()
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return run(PY, ROOT / "scripts" / "demo.py", *args, env=env, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("job", choices=["setup", "test", "demo"])
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="passed to pytest / the demo")
    ns = parser.parse_args()
    if ns.job == "setup":
        setup()
        sys.exit(0)
    sys.exit(test(ns.rest) if ns.job == "test" else demo(ns.rest))


if __name__ == "__main__":
    main()
