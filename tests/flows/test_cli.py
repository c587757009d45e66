"""``proxima-fleet``, the demo script that left the product package, and ``scripts/dev.py``."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from flows.cli import app

ROOT = Path(__file__).resolve().parents[2]


def test_the_old_demo_verb_points_at_dev_py_and_fails():
    result = CliRunner().invoke(app, ["demo", "--agents", "8"])
    assert result.exit_code == 2
    assert "python3 scripts/dev.py demo" in result.stderr


def test_the_demo_script_loads_outside_the_installed_packages():
    """The demo moved from flows/demo.py to scripts/demo.py: what dev.py runs must load."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "--agents" in r.stdout and "PROXIMA_DEMO_AGENTS" in r.stdout


def test_proxima_fleet_starts_without_prefect():
    """Only ``deploy`` and ``audit run`` need Prefect, and import it inside the verb: every
    other verb would pay seconds for it."""
    code = "import sys, flows.cli; print('prefect' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def _dev_py() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import dev  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return dev  # type: ignore[no-any-return]


def test_dev_py_names_each_failed_test_from_pytests_report(tmp_path: Path):
    """CI keeps only the tail of the output, and libraries print pages at interpreter exit
    after pytest's own summary: ``dev.py test`` names what failed again, as its last lines."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_passes():\n    pass\n"
        "def test_fails():\n    assert 1 == 2, 'one is not two'\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('no fixture')\n"
        "def test_errors(broken):\n    pass\n"
    )
    report = tmp_path / "report.xml"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout
    dev = _dev_py()
    lines = dev.failed_tests(report)
    assert lines == [
        "FAILURE test_sample::test_fails - AssertionError: one is not two",
        'ERROR test_sample::test_errors - failed on setup with "RuntimeError: no fixture"',
    ]
    assert dev.failed_tests(tmp_path / "missing.xml")[0].startswith("no test report")


@pytest.mark.parametrize(
    ("args", "selects"),
    [
        ([], False),
        (["-x", "-v"], False),
        (["-n", "4", "--timeout", "60", "-p", "no:cacheprovider"], False),
        (["--timeout=60", "-rA"], False),
        (["-k", "onboarding", "-x"], True),
        (["-konboarding"], True),
        (["-m", "postgres"], True),
        (["tests/console"], True),
        (["-p", "no:cacheprovider", "tests/services/test_leases.py::test_one"], True),
        (["--deselect", "tests/e2e"], True),
        (["--lf"], True),
    ],
)
def test_dev_py_tells_a_selection_from_options(args: list[str], selects: bool) -> None:
    """``dev.py test`` with options only runs everything (checks, every lane, in parallel); a
    selection runs only ruff and prepares only what the selected tests need."""
    assert _dev_py().selects_tests(args) is selects


def _collected_needs(tmp_path: Path, *selection: str) -> dict[str, object]:
    report = tmp_path / "needs.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *selection,
        ],
        cwd=ROOT,
        env={**os.environ, "PROXIMA_TEST_NEEDS": str(report)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(report.read_text())  # type: ignore[no-any-return]


def test_a_collected_selection_reports_what_its_tests_need(tmp_path: Path) -> None:
    """``dev.py test -k <one unit test>`` built the Kubernetes control plane, installed Chromium
    and the release tools first: the collection now says what the selected tests need (by
    directory, fixture and marker), and a unit test needs nothing."""
    unit = "tests/rollout_policy/test_policy_defaults.py"
    assert _collected_needs(tmp_path, unit)["needs"] == []
    needs = _collected_needs(
        tmp_path,
        unit,
        "tests/cluster/test_rbac.py",  # the directory and kube_cluster
        "tests/console/test_revocation_race.py",  # a test marked postgres
        "tests/web/test_sign_in.py",  # the browser
    )
    assert needs["needs"] == ["chromium", "control-plane", "postgres"]


def _sample_suite(root: Path, *modules: tuple[str, str]) -> Path:
    """A suite in ``root`` with the test kit's lanes plugin and a stand-in ``kube_cluster``."""
    (root / "conftest.py").write_text(
        "import os, pytest\n"
        "pytest_plugins = ['testkit.lanes']\n"
        "@pytest.fixture(scope='session')\n"
        "def kube_cluster():\n    return os.environ.get('PYTEST_XDIST_WORKER')\n"
    )
    for path, code in modules:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(code)
    return root


def _pytest_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_tests_sharing_a_heavy_session_resource_run_on_one_xdist_worker(tmp_path: Path) -> None:
    """Under ``-n``, every worker would start its own control plane (and xdist_group marks are
    ignored under pytest 9.2): the tests of tests/cluster form one work unit, while the others
    spread over the workers."""
    body = (
        "import os, pytest, time\n"
        "@pytest.mark.parametrize('n', range(6))\n"
        "def test_{name}(n, record_property):\n"
        "    record_property('worker', os.environ['PYTEST_XDIST_WORKER'])\n"
        "    time.sleep(0.3)\n"
    )
    suite = _sample_suite(
        tmp_path,
        ("tests/cluster/test_cluster.py", body.format(name="in_cluster")),
        ("tests/test_free.py", body.format(name="free")),
    )
    report = tmp_path / "report.xml"
    r = _pytest_in(suite, "-n", "2", "--dist", "loadgroup", f"--junitxml={report}", "tests")
    assert r.returncode == 0, r.stdout + r.stderr
    import xml.etree.ElementTree as ET

    workers: dict[str, set[str]] = {"in_cluster": set(), "free": set()}
    for case in ET.parse(report).getroot().iter("testcase"):
        worker = case.find("properties/property[@name='worker']")
        assert worker is not None
        kind = "free" if case.get("name", "").startswith("test_free") else "in_cluster"
        workers[kind].add(str(worker.get("value")))
    assert len(workers["in_cluster"]) == 1, workers
    assert workers["free"] - workers["in_cluster"], f"nothing ran beside the group: {workers}"


def test_a_test_outside_tests_cluster_may_not_use_the_control_plane(tmp_path: Path) -> None:
    """The parallel run groups by directory: a control-plane test elsewhere would start a second
    control plane on another worker, so the collection refuses it, naming the rule."""
    suite = _sample_suite(
        tmp_path, ("tests/test_stray.py", "def test_stray(kube_cluster):\n    pass\n")
    )
    r = _pytest_in(suite, "--collect-only", "tests")
    assert r.returncode == 4, r.stdout + r.stderr
    assert (
        "tests/test_stray.py::test_stray uses kube_cluster: tests that do live in tests/cluster/ or"
        in r.stderr
    )
