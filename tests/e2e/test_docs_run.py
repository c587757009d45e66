"""The runnable shell blocks of README.md and docs/*.md, run as written against real processes
(docs that are executable). The convention is in docs/testing.md and
``testkit/docblocks.py``.

Each script runs with ``bash -euo pipefail`` from the repository, in its own session, with free
ports and a temporary data directory in the environment (``PROXIMA_PORT``, ``PROXIMA_NATS_PORT``,
``PREFECT_PORT``, ``PROXIMA_DATA_DIR``, a private ``PREFECT_HOME``), as the blocks read them. A
script that ``needs=console`` gets a real Console (``CONSOLE``, ``TOKEN``, ``SIGNING_KEY``).
Every process a script left running is ended afterwards: its session, then anything carrying
the run's marker variable."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from testkit.builds import build_agent, suite_signing_key
from testkit.console import ConsoleProcess
from testkit.docblocks import DocScript, doc_scripts, missing_lines
from testkit.net import free_port

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPTS = {s.id: s for s in doc_scripts(PAGES)}
MARKER = "PROXIMA_DOCS_RUN"
SCRIPT_TIMEOUT = 540  # Prefect's server, a deploy and a worker's first run take minutes here


def test_the_blocks_an_operator_copies_are_marked_runnable():
    assert {
        "README.md:readme-by-hand",
        "flows.md:flows-local",
        "console.md:console-rollout",
        "console.md:console-settings",
        "agent.md:agent-shared-dir",
        "self-update.md:self-update-build",
        "releasing.md:release-repos",
    } <= set(SCRIPTS)


def test_quoted_output_must_match_whole_lines():
    assert missing_lines(["a … c"], "x\na b c\n") == []
    assert missing_lines(["a … c"], "xa b c\n") == ["a … c"]
    assert missing_lines(["exit status 4"], "exit status 40\n") == ["exit status 4"]


def _end(run_id: str, session: int) -> None:
    """End what the script started: its process group, then any process that carries this
    run's marker (a server or worker that made its own session)."""
    try:
        os.killpg(session, signal.SIGTERM)
    except ProcessLookupError:
        pass
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARKER) == run_id:
                left.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for proc in left:
        proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=15)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=15)


def _run(script: DocScript, env: dict[str, str], logs: Path) -> subprocess.CompletedProcess[str]:
    """Run until bash exits (not until its output closes: a server the script leaves running
    holds it open), then end what it left."""
    run_id = uuid.uuid4().hex
    out_path, err_path = logs / "stdout", logs / "stderr"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script.body],
            cwd=REPO,
            env={**env, MARKER: run_id},
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=SCRIPT_TIMEOUT)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _end(run_id, proc.pid)
    output = (out_path.read_text(), err_path.read_text())
    if timed_out:
        pytest.fail(f"{script.id} did not finish in {SCRIPT_TIMEOUT} s:\n{output[0][-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.wait(), *output)


@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
@pytest.mark.parametrize("script_id", sorted(SCRIPTS))
def test_a_runnable_doc_block_runs_as_written(script_id: str, tmp_path: Path, console_factory):
    script = SCRIPTS[script_id]
    env = {
        **os.environ,
        "PROXIMA_PORT": str(free_port()),
        "PROXIMA_NATS_PORT": str(free_port()),
        "PREFECT_PORT": str(free_port()),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PROXIMA_DATA_DIR": str(tmp_path / "lab"),
        "PROXIMA_PUBLIC_URL": "http://127.0.0.1",
    }
    env.pop("PREFECT_API_URL", None)  # a block that uses Prefect starts and names its own
    if "console" in script.needs:
        console: ConsoleProcess = console_factory(name="docs-console")
        key, _ = suite_signing_key(tmp_path / "keys")  # the key testkit's Console trusts
        env |= {"CONSOLE": console.url, "TOKEN": console.token, "SIGNING_KEY": str(key)}
    logs = tmp_path / "logs"
    logs.mkdir()
    done = _run(script, env, logs)
    output = done.stdout + "\n" + done.stderr
    assert done.returncode == 0, f"{script.id} exited {done.returncode}:\n{output[-4000:]}"
    assert missing_lines(script.expected, output) == [], output[-4000:]
    if script.name == "readme-by-hand":
        assert '"agent_id"' in done.stdout and '"lab-1"' in done.stdout


def test_the_thin_build_is_the_size_docs_self_update_says(tmp_path: Path):
    """docs/self-update.md quoted ~230 KB for a thin build that was 442 KB."""
    text = (REPO / "docs" / "self-update.md").read_text()
    quoted = re.search(r"environment\. ~(\d+) KB", text)
    assert quoted, "docs/self-update.md no longer quotes the thin build's size"
    build = build_agent("0.9.0", tmp_path, key=None)
    size_kb = build.path.stat().st_size / 1000
    assert abs(size_kb - int(quoted.group(1))) <= int(quoted.group(1)) / 4, size_kb


def test_the_readme_describes_the_main_job_and_rollouts_as_they_are():
    """What broke: the README called rollouts "next" and described the
    main job as enrollment only."""
    readme = (REPO / "README.md").read_text()
    main_job = readme.split("## The main job", 1)[1].split("\n## ", 1)[0]
    assert "fleet-rollout" in main_job and "0.9.0" in main_job
    assert not re.search(r"\bnext\b", readme.split("## Tests and benchmarks")[0], re.I)


def test_every_rollout_decision_with_a_body_is_shown_with_one():
    """`abort` (and `pause`) take a JSON body; a doc showing `…/abort` without one sent the
    operator into a 422."""
    console = (REPO / "docs" / "console.md").read_text()
    assert "`pause` and `abort` take a JSON body" in console
    body = SCRIPTS["console.md:console-rollout"].body
    assert re.search(r"/abort\" -d '\{\"reason\": ", body)
