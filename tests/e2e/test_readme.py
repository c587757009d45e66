"""The README's runnable shell blocks, run as written (issue 16.11: docs that are executable).

A block preceded by ``<!-- runnable: <name> -->`` is run with ``bash -euo pipefail`` from the
repository, with free ports and a temporary data directory in the environment (the block reads
``PROXIMA_PORT`` / ``PROXIMA_NATS_PORT`` / ``PROXIMA_DATA_DIR`` like the programs do)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from testkit.net import free_port

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- runnable: ([\w-]+) -->\n```sh\n(.*?)```", re.S)


def runnable_blocks(path: Path) -> dict[str, str]:
    return {name: body for name, body in BLOCK.findall(path.read_text())}


def test_the_readme_marks_its_by_hand_block_runnable():
    assert "readme-by-hand" in runnable_blocks(REPO / "README.md")


@pytest.mark.parametrize("name", sorted(runnable_blocks(REPO / "README.md")))
def test_a_runnable_readme_block_runs_as_written(name: str, tmp_path: Path):
    script = runnable_blocks(REPO / "README.md")[name]
    env = {
        **os.environ,
        "PROXIMA_PORT": str(free_port()),
        "PROXIMA_NATS_PORT": str(free_port()),
        "PROXIMA_DATA_DIR": str(tmp_path / "lab"),
        "PROXIMA_PUBLIC_URL": "http://127.0.0.1",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert '"agent_id"' in done.stdout and '"lab-1"' in done.stdout
