"""What `proxima-console serve` says when it cannot start: one line with the reason and the fix,
never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", "serve"],
        env={
            **os.environ,
            "PROXIMA_DATA_DIR": str(tmp_path),
            "PROXIMA_PORT": "0",
            "PROXIMA_PUBLIC_URL": "https://console.example.com",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if " ERROR " in ln or "Traceback" in ln]


def test_a_taken_nats_port_is_one_line_naming_the_port_and_the_fix(tmp_path: Path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = _serve(tmp_path, PROXIMA_NATS_PORT=str(port))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    (line,) = _errors(done.stderr)
    assert f"127.0.0.1:{port}" in line and "address already in use" in line
    assert "set PROXIMA_NATS_PORT to a free port" in line
    # ... and the command ends with the one error line every Proxima CLI ends with.
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("proxima-console: error: startup failed: ") and str(port) in last
    assert done.returncode == 3


def test_an_unreachable_external_nats_is_waited_for_then_one_line(tmp_path: Path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    done = _serve(
        tmp_path,
        PROXIMA_NATS_URL=f"nats://127.0.0.1:{port}",
        PROXIMA_NATS_CONNECT_WAIT_SECONDS="2",
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "is not reachable yet; waiting for it" in done.stderr
    (line,) = _errors(done.stderr)
    assert f"no NATS server at nats://127.0.0.1:{port} accepted a connection within 2 s" in line


def test_sigterm_while_waiting_for_an_external_nats_stops_at_once(tmp_path: Path):
    """Broke: the wait (PROXIMA_NATS_CONNECT_WAIT_SECONDS, 120 s by default) ignored SIGTERM
    until it ended: a pod being deleted, or Ctrl-C, waited out the whole window."""
    import signal
    import time

    from testkit.waiting import wait_for

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "console", "serve"],
            env={
                **os.environ,
                "PROXIMA_DATA_DIR": str(tmp_path),
                "PROXIMA_PORT": "0",
                "PROXIMA_PUBLIC_URL": "https://console.example.com",
                "PROXIMA_NATS_URL": f"nats://127.0.0.1:{port}",
                "PROXIMA_NATS_CONNECT_WAIT_SECONDS": "600",
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: "is not reachable yet; waiting for it" in log.read_text(),
            timeout=90,
            what="the Console waiting for NATS",
        )
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    print(f"\nSIGTERM during the NATS wait: exited {code} after {took:.2f} s")
    assert took < 5
    assert code in (3, -signal.SIGTERM), code  # uvicorn: start-up failed, or the signal
    assert "Traceback" not in text
    assert "stopped while waiting for NATS at" in text
