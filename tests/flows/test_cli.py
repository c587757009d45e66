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
