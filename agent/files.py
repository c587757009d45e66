"""Durable small files: write to a temp file in the same directory, fsync, rename, fsync dir.

A crash at any point leaves either the old content or the new one, never a torn file.
:func:`append_durable` is the cheaper kind for journals: one append and one ``fdatasync``; a
crash can tear only the last line, which readers of a journal drop.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

__all__ = ["append_durable", "ensure_private_dir", "set_aside", "write_atomic"]


_datasync = getattr(os, "fdatasync", os.fsync)  # fsync where there is no fdatasync (macOS)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, exclusive: bool = False) -> None:
    """Replace ``path`` with ``data``. With ``exclusive`` an existing file is never clobbered.

    ``exclusive`` raises :class:`FileExistsError` when ``path`` exists, even when another
    process created it between our check and our rename: the final step is ``link``, which
    refuses an existing target atomically.
    """
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:
                # Filesystems without hard links: a plain check-then-rename is the best we get.
                if path.exists():
                    raise FileExistsError(path) from None
                os.replace(tmp, path)
            else:
                tmp.unlink()
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


def append_durable(path: Path, data: bytes, *, first: bytes = b"", mode: int = 0o600) -> None:
    """Append ``data`` to ``path`` and ``fdatasync`` it before returning. A missing file is
    created (``mode``) starting with ``first``, and its directory synced: the new name is
    durable too. An append that fails (a full disk) is cut back off, so the next one does not
    follow half a line."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        created = False
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, mode)
        created = True
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(first + data if created else data)
            while view:
                view = view[os.write(fd, view) :]
            _datasync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) if missing; an existing directory keeps its mode."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def set_aside(path: Path) -> Path:
    """Rename an unusable file to ``<name>.corrupt-<unix time>`` beside it and return the new
    path. Nothing is deleted, and an earlier file set aside is never overwritten."""
    stamp = int(time.time())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.replace(path, aside)
    _fsync_dir(path.parent)
    return aside
