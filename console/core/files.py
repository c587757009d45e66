"""The Console's files are its own: directories 0700, files 0600 (the database, hosted builds,
NATS keys and config). Created so, and repaired at start when an older version left them wider
(``console.db`` used to be 0644)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["private_dir", "private_file"]


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter (created with parents if missing)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _narrow(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """``path`` as a file only its owner can read (created empty if missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    _narrow(path, 0o600)
    return path


def _narrow(path: Path, mode: int) -> None:
    with contextlib.suppress(OSError):  # not ours (a mounted volume): leave it to its owner
        if path.stat().st_mode & 0o777 & ~mode:
            os.chmod(path, mode)
