"""The trial: a new build, installed but not yet in charge, proves it can run.

Both sides live here. The old build starts the installed program as a child with
:data:`TRIAL_ENV` set (:func:`run_trial`) and waits for its ``/readyz`` to answer 200 within the
health timeout (a trial child's ``/readyz`` means enrolled and connected to NATS, as every
build's did before ``/readyz`` came to mean "working"), relaying the child's log to its own. The
child (:class:`TrialChild`) loads the identity, serves health on a port of its own (written to
:data:`TRIAL_PORT_FILE`) and connects to NATS, and does nothing else: no heartbeats, no
commands; it stops with the trial's time, or as soon as the agent that started it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from agent import __version__
from agent.errors import EnvironmentProblemError
from agent.health import HealthServer, Readiness
from agent.selfupdate.handover import program_argv
from agent.selfupdate.signatures import load_signing_key
from agent.session import NatsSession, ReconnectPolicy
from agent.state import StateStore
from contracts.durations import format_duration

if TYPE_CHECKING:
    from agent.settings import AgentSettings

__all__ = ["TRIAL_ENV", "TRIAL_PORT_FILE", "TrialChild", "run_trial", "trial_parent"]

log = logging.getLogger(__name__)

TRIAL_PORT_FILE = "update-trial.port"
# Set only in the environment of a build under trial: "<parent pid>:<seconds to live>".
TRIAL_ENV = "PROXIMA_UPDATE_TRIAL"
_TRIAL_STOP_SECONDS = 5.0
_POLL = 0.05


def trial_parent(value: str | None) -> tuple[int, float] | None:
    """``(parent pid, seconds to live)`` from :data:`TRIAL_ENV`, ``None`` when not a trial."""
    if not value:
        return None
    pid, _, ttl = value.partition(":")
    try:
        return int(pid), float(ttl or 120)
    except ValueError:
        return None


# -- the old build's side -------------------------------------------------------------------


async def run_trial(
    program: Path, version: str, *, data_dir: Path, health_timeout: float
) -> str | None:
    """Run the installed build as a trial child; ``None`` when it became healthy in time,
    else the error text (without the "restored" part)."""
    port_file = data_dir / TRIAL_PORT_FILE
    port_file.unlink(missing_ok=True)
    env = dict(os.environ)
    timeout = health_timeout
    env[TRIAL_ENV] = f"{os.getpid()}:{timeout + 30:g}"
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *program_argv(program),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    last_lines: list[str] = []
    relay = asyncio.create_task(_relay(proc, last_lines))
    try:
        deadline = started + timeout
        while True:
            if proc.returncode is not None:
                await asyncio.wait_for(relay, 2)
                last = last_lines[-1] if last_lines else ""
                return (
                    f"new version {version} exited with code {proc.returncode} before it "
                    "became healthy" + (f" ({last})" if last else "")
                )
            port = _read_port(port_file)
            if port is not None and await _readyz(port):
                log.info(
                    "self_update: trial of %s healthy after %.1fs",
                    version,
                    time.monotonic() - started,
                )
                return None
            if time.monotonic() >= deadline:
                return (
                    f"new version {version} did not become healthy within "
                    f"{format_duration(timeout)}"
                )
            await asyncio.sleep(_POLL)
    finally:
        await _stop(proc)
        relay.cancel()
        with contextlib.suppress(BaseException):
            await relay
        port_file.unlink(missing_ok=True)


async def _relay(proc: asyncio.subprocess.Process, last_lines: list[str]) -> None:
    """The trial's log goes to ours (operators see why it failed); keep the last lines."""
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        text = line.decode(errors="replace").rstrip()
        sys.stderr.write(text + "\n")
        last_lines.append(text)
        del last_lines[:-5]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(_TRIAL_STOP_SECONDS):
            await proc.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def _readyz(port: int) -> bool:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 2)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    parts = line.split()
    return len(parts) >= 2 and parts[1] == b"200"


def _read_port(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


# -- the new build's side -------------------------------------------------------------------


class TrialChild:
    """A new build proving itself for the build that runs now: identity, health, NATS."""

    def __init__(self, settings: AgentSettings, parent: int, ttl: float) -> None:
        # The same start-up checks as a real start: a build that cannot read the configured
        # signing key must fail its trial, not the start after the hand-over.
        load_signing_key(settings.signing_public_key, settings.signing_public_key_file)
        self.settings = settings
        self.parent = parent
        self.ttl = ttl
        self.readiness = Readiness()
        self.store = StateStore(settings.data_dir)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("received %s: stopping", sig.name)
        self.stop()

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        s = self.settings
        state = self.store.load(expected_type=s.agent_type)
        if state is None:
            raise EnvironmentProblemError("update trial", f"no state file in {s.data_dir}")
        log.info(
            "proxima-agent %s update trial for agent %s: health and nats only, no heartbeats",
            __version__,
            state.agent_id,
        )
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self._on_signal, sig)
        self.readiness.mark_enrolled()
        # /readyz means enrolled and connected here, whichever build polls it (docs: health).
        health = HealthServer(
            self.readiness,
            "127.0.0.1",
            0,
            s.data_dir,
            port_file=TRIAL_PORT_FILE,
            strict_ready=True,
        )
        await health.start()
        policy = ReconnectPolicy(wait=0.2, max_wait=1.0, jitter=s.nats_reconnect_jitter)
        session = NatsSession(
            self.store, self.readiness, policy=policy, on_message=lambda *_: None, trial=True
        )
        task = asyncio.create_task(session.run(), name="nats-session")
        until = time.monotonic() + self.ttl
        try:
            # Never outlive the agent that started us, nor the trial's time.
            while not self._stop.is_set() and os.getppid() == self.parent:
                if time.monotonic() >= until or task.done():
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await self._stop.wait()
        finally:
            await session.stop()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, policy.drain_timeout + 1)
            await health.close()
            log.info("update trial stopped")
