#!/usr/bin/env python3
"""Set up a fresh machine (only Python 3.11+ and pip needed) and run the project's jobs.

    python3 scripts/dev.py demo    # set up, then run a local fleet (the main job)
    python3 scripts/dev.py test    # set up, then lint, type-check and run the whole test suite

Stdlib only: this runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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


def postgres_installed() -> bool:
    return bool(list(Path("/usr/lib/postgresql").glob("*/bin/initdb")))


def ensure_postgres() -> bool:
    if not postgres_installed():
        apt_install("postgresql")
    return postgres_installed()


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


#: what a test may need beyond the venv (testkit/lanes.py says which tests need which), and how
#: this machine gets it
PREPARE = {
    "chromium": ensure_chromium,
    "release-tools": ensure_release_tools,
    "control-plane": ensure_control_plane,
    "postgres": ensure_postgres,
}


def missing_needs() -> set[str]:
    """The needs this machine does not have yet (cheap checks: nothing is installed or built)."""
    missing = set()
    if not Path("/usr/bin/chromium").exists():
        missing.add("chromium")
    if not all(shutil.which(tool) for tool in RELEASE_TOOLS):
        missing.add("release-tools")
    if not postgres_installed():
        missing.add("postgres")
    tools = [PY, ROOT / "scripts" / "tools.py", "control-plane", "--check"]
    if subprocess.run([str(c) for c in tools], cwd=ROOT).returncode != 0:
        missing.add("control-plane")
    return missing


#: pytest options whose value is the next argument (so that value is not a test path)
VALUE_OPTIONS = {
    *("-k", "-m", "-p", "-c", "-o", "-W", "-r", "-n", "--deselect", "--ignore", "--ignore-glob"),
    *("--rootdir", "--basetemp", "--confcutdir", "--junitxml", "--junit-xml", "--durations"),
    *("--durations-min", "--maxfail", "--timeout", "--timeout-method", "--tb", "--capture"),
    *("--color", "--import-mode", "--log-level", "--log-file", "--log-cli-level", "--dist"),
    *("--override-ini", "--config-file", "--numprocesses", "--maxprocesses", "--tx"),
    *("--hypothesis-seed", "--hypothesis-profile", "--last-failed-no-failures", "--lfnf"),
}
#: pytest options that select tests
SELECTING = {"-k", "-m", "--deselect", "--ignore", "--ignore-glob", "--lf", "--last-failed"}
SELECTING |= {"--sw", "--stepwise"}


def selects_tests(pytest_args: list[str]) -> bool:
    """Whether the arguments select tests (-k, -m, paths, node ids...) rather than only set
    options (-x, -v, -n 4): a selection runs without the whole-tree checks."""
    args = iter(pytest_args)
    for arg in args:
        name = arg.split("=", 1)[0]
        if arg == "--":
            return any(True for _ in args)
        if not arg.startswith("-"):
            return True
        if name in SELECTING or (arg[:2] in ("-k", "-m") and len(arg) > 2):
            return True
        if arg in VALUE_OPTIONS:
            next(args, None)
    return False


def collect_needs(pytest_args: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    """(pytest's exit code, what the selected tests need): ``pytest --collect-only`` with
    testkit/lanes.py's report. A failed collection's output is printed."""
    report = ROOT / ".cache" / "test-needs.json"
    report.parent.mkdir(exist_ok=True)
    report.unlink(missing_ok=True)
    say("collecting the selected tests (to prepare only what they need)")
    done = subprocess.run(
        [str(BIN / "pytest"), "--collect-only", "-q", *pytest_args, "-n", "0"],
        cwd=ROOT,
        env={**env, "PROXIMA_TEST_NEEDS": str(report)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print((done.stdout + done.stderr)[-6000:], file=sys.stderr)
        return done.returncode, set()
    try:
        found = json.loads(report.read_text())
    except (OSError, ValueError):
        return 0, set(PREPARE)  # no report (tests outside tests/): prepare everything
    needs = ", ".join(found["needs"]) or "nothing more"
    say(f"{found['tests']} tests selected; they need: {needs}")
    return 0, set(found["needs"])


#: arguments by which the caller chose (or disabled) xdist's workers themselves
XDIST_OPTIONS = {"--numprocesses", "--tx", "no:xdist"}


def workers() -> str:
    """pytest-xdist workers of a full run: PROXIMA_TEST_WORKERS, else one per CPU (at least 2)."""
    return os.environ.get("PROXIMA_TEST_WORKERS") or str(max(2, os.cpu_count() or 1))


def test(pytest_args: list[str]) -> int:
    setup()
    # The package index is reachable (setup just used it): run the self-contained build test too.
    env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PROXIMA_TEST_SELF_CONTAINED": "1",
    }
    selected = selects_tests(pytest_args)
    prepare = set(PREPARE)
    if selected:
        # Only what the selected tests need and this machine lacks (collecting only then).
        prepare = missing_needs()
        if prepare:
            code, needs = collect_needs(pytest_args, env)
            if code != 0:
                return report_failure(code, None)
            prepare &= needs
    # The release lane's Debian base and wheels (tests/release) are cached in the repo's own
    # .cache/release (keyed by content); set PROXIMA_RELEASE_CACHE to share them between clones.
    for need in ("chromium", "release-tools", "control-plane"):
        if need in prepare:
            PREPARE[need]()
    if "postgres" in prepare and not ensure_postgres():
        say("PostgreSQL is not available: the postgres lane will be skipped")
    if postgres_installed():
        env["PROXIMA_REQUIRE_POSTGRES"] = "1"
    say("ruff")
    run(BIN / "ruff", "check", ".")
    run(BIN / "ruff", "format", "--check", ".")
    parallel: list[str] = []
    if selected:
        say("tests selected: mypy and import-linter run on a full `dev.py test` (no arguments)")
    else:
        say("mypy (strict on contracts/ and rollout_policy/)")
        run(BIN / "mypy", "contracts", "rollout_policy", "console", "agent", "flows", "testkit")
        say("import-linter (layer rules from DESIGN.md)")
        run(BIN / "lint-imports")
        if not any(a.split("=")[0] in XDIST_OPTIONS or a[:2] == "-n" for a in pytest_args):
            parallel = ["-n", workers()]
    say(f"pytest{' on ' + parallel[1] + ' workers (pytest-xdist)' if parallel else ''}")
    junit = ROOT / ".cache" / "pytest-results.xml"
    junit.unlink(missing_ok=True)
    code = run(BIN / "pytest", f"--junitxml={junit}", *parallel, *pytest_args, env=env, check=False)
    return report_failure(code, junit)


def report_failure(code: int, junit: Path | None) -> int:
    if code != 0:
        # Libraries can print pages at interpreter exit (after pytest's own summary), and CI
        # keeps only the tail: name what failed once more, as the very last lines.
        for line in failed_tests(junit) if junit else []:
            print(f"dev.py: {line}", file=sys.stderr)
        what = "no tests ran" if code == 5 else "tests failed"
        print(f"dev.py: {what} (pytest exit code {code})", file=sys.stderr)
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
