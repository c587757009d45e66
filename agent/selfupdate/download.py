"""Download and verify: a new build fetched beside the program, then checked three ways.

Each step fails with the real error text (see ``docs/self-update.md``)::

    download     streamed, size-capped, into a temp file beside the program (or the data
                 directory when the program's directory is read-only)
    sha256       "sha256 mismatch: expected … got …"
    signature    "signature does not verify with the configured signing key"
    smoke check  ``<python> new version --json`` prints the expected version, in time
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from agent.httpclient import DownloadTooLargeError, HttpRequest, TransportError
from agent.selfupdate.failures import FailedStep, UpdateFailedError, UpdateFailure
from agent.selfupdate.handover import SELF_UPDATE_PROTOCOL
from agent.selfupdate.signatures import SigningPublicKey
from agent.selfupdate.trial import TRIAL_ENV
from contracts.durations import format_duration
from contracts.rollouts import ArtifactRef

__all__ = [
    "MAX_ARTIFACT_BYTES",
    "fetch",
    "smoke_check",
    "stage_file",
    "sweep_staged",
    "verify",
]

log = logging.getLogger(__name__)

MAX_ARTIFACT_BYTES = 512 * 2**20
_SMOKE_MIN_SECONDS = 15.0


def stage_file(directory: Path, name: str) -> tuple[IO[bytes], Path]:
    fd, path = tempfile.mkstemp(prefix=f".{name}.new-", dir=directory)
    return os.fdopen(fd, "wb"), Path(path)


def _failed(step: FailedStep, text: str, errno: int | None = None) -> UpdateFailedError:
    return UpdateFailedError(UpdateFailure(step, text, errno))


async def fetch(
    url: str,
    program: Path,
    *,
    data_dir: Path,
    version: str,
    download: Callable[..., Any],
    max_bytes: int,
) -> tuple[Path, str]:
    """Download beside the program so the install is one rename on one filesystem; when
    that directory is read-only, into the data directory (the backup step then reports
    the read-only program path with the error operators look for)."""
    try:
        sink, staged = stage_file(program.parent, program.name)
    except OSError as e:
        log.info("cannot stage beside %s (%s); staging in %s", program, e, data_dir)
        sink, staged = stage_file(data_dir, program.name)
    digest = hashlib.sha256()
    request = HttpRequest(
        "GET",
        url,
        headers={"user-agent": f"proxima-agent/{version}"},
        timeout=60.0,
        follow_redirects=True,
    )
    try:
        with sink:
            response = await asyncio.to_thread(
                download, request, sink, limit=max_bytes, on_chunk=digest.update
            )
            sink.flush()
            os.fsync(sink.fileno())
    except TransportError as e:
        staged.unlink(missing_ok=True)
        raise _failed(FailedStep.DOWNLOAD, f"download {url}: {e.detail}") from None
    except DownloadTooLargeError:
        staged.unlink(missing_ok=True)
        text = f"download {url}: larger than {max_bytes // 2**20} MiB"
        raise _failed(FailedStep.DOWNLOAD_TOO_LARGE, text) from None
    except OSError as e:
        staged.unlink(missing_ok=True)
        text = f"download {url}: write {staged}: {e.strerror or e}"
        raise _failed(FailedStep.DOWNLOAD, text, e.errno) from None
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    if response.status != 200:
        staged.unlink(missing_ok=True)
        reason = f" {response.reason}" if response.reason else ""
        raise _failed(FailedStep.DOWNLOAD, f"download {url}: HTTP {response.status}{reason}")
    _copy_mode(program, staged)
    return staged, digest.hexdigest()


def verify(artifact: ArtifactRef, digest: str, key: SigningPublicKey) -> None:
    if digest != artifact.sha256:
        text = f"sha256 mismatch: expected {artifact.sha256} got {digest}"
        raise _failed(FailedStep.CHECKSUM, text)
    if not key.verifies(bytes.fromhex(digest), artifact.signature):
        text = "signature does not verify with the configured signing key"
        raise _failed(FailedStep.SIGNATURE, text)


async def smoke_check(staged: Path, expected: str, *, health_timeout: float) -> None:
    """The new build, run once as ``version --json``, names the expected version and speaks
    the hand-over protocol."""
    timeout = max(health_timeout, _SMOKE_MIN_SECONDS)
    env = {k: v for k, v in os.environ.items() if k != TRIAL_ENV}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(staged),
        "version",
        "--json",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        text = f"new build {expected} did not answer 'version' within {format_duration(timeout)}"
        raise _failed(FailedStep.SMOKE_CHECK, text) from None
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
        text = f"new build {expected} exited with code {proc.returncode} on 'version'" + (
            f": {last}" if last else ""
        )
        raise _failed(FailedStep.SMOKE_CHECK, text)
    try:
        answer = json.loads(out)
        reported, protocol = str(answer["version"]), int(answer.get("self_update_protocol", 0))
    except (ValueError, KeyError, TypeError):
        text = f"new build {expected} did not print its version as JSON"
        raise _failed(FailedStep.SMOKE_CHECK, text) from None
    if reported != expected:
        text = f"new build reports version {reported}, expected {expected}"
        raise _failed(FailedStep.SMOKE_CHECK, text)
    if protocol < SELF_UPDATE_PROTOCOL:
        text = (
            f"new build {expected} cannot take over a self_update "
            f"(protocol {protocol}, need {SELF_UPDATE_PROTOCOL})"
        )
        raise _failed(FailedStep.SMOKE_CHECK, text)


def sweep_staged(program: Path, data_dir: Path, older_than: float = 3600.0) -> None:
    """Temp files of downloads cut short by a crash (old enough not to be another agent's)."""
    now = time.time()
    for directory in (program.parent, data_dir):
        try:
            leftovers = list(directory.glob(f".{program.name}.new-*"))
        except OSError:
            continue
        for path in leftovers:
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > older_than:
                    path.unlink()
                    log.info("removed %s, left by an interrupted self_update", path)


def _copy_mode(program: Path, staged: Path) -> None:
    """The new program gets the old one's permission bits (0755 when there is none)."""
    try:
        mode = program.stat().st_mode & 0o7777
    except OSError:
        mode = 0o755
    with contextlib.suppress(OSError):
        os.chmod(staged, mode)
