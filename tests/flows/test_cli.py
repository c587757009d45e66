"""``proxima-fleet`` and the demo script that left the product package."""

import subprocess
import sys
from pathlib import Path

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
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import dev  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    lines = dev.failed_tests(report)
    assert lines == [
        "FAILURE test_sample::test_fails - AssertionError: one is not two",
        'ERROR test_sample::test_errors - failed on setup with "RuntimeError: no fixture"',
    ]
    assert dev.failed_tests(tmp_path / "missing.xml")[0].startswith("no test report")
