"""Facts about the running program (where it is, whether it could replace itself) and the file
operations that replace it.

:class:`ProgramFiles` is the one seam through which ``self_update`` touches the program file: the
real one calls :mod:`os`; a test can hand the updater one that fails a chosen operation with a
chosen errno where no read-only mount can be made. Its errors read like the Go agent's
(``rename <old> <new>: read-only file system``), which operators and runbooks grep for.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from contracts.vocabulary import AgentType
from contracts.vocabulary.commands import CommandFailureKind

__all__ = [
    "FileOperationError",
    "ProgramFiles",
    "SelfUpdateBlocker",
    "can_self_update",
    "go_strerror",
    "running_program",
    "self_update_blocker",
]

# The texts Go's syscall package prints (lowercase glibc strings); other errnos fall back to
# the C library's text with its first letter lowered, which is what Go's table holds too.
_GO_TEXT = {
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.EXDEV: "invalid cross-device link",
    errno.ENOSPC: "no space left on device",
    errno.EBUSY: "device or resource busy",
    errno.ETXTBSY: "text file busy",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "not a directory",
    errno.EEXIST: "file exists",
    errno.EIO: "input/output error",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENAMETOOLONG: "file name too long",
}

_EOCD = b"PK\x05\x06"


def go_strerror(error: OSError) -> str:
    """``error``'s errno as Go prints it: ``read-only file system``, ``permission denied``."""
    if error.errno in _GO_TEXT:
        return _GO_TEXT[error.errno]
    text = error.strerror or (os.strerror(error.errno) if error.errno else str(error))
    return text[:1].lower() + text[1:]


class FileOperationError(OSError):
    """``rename <old> <new>: <go error text>``; ``errno`` is the original one."""

    def __init__(self, op: str, paths: tuple[Path, ...], cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.op = op
        self.paths = paths
        self.cause = cause
        self.text = f"{op} {' '.join(str(p) for p in paths)}: {go_strerror(cause)}"

    def __str__(self) -> str:
        return self.text


# Filesystems without hard links answer these to link(2); a copy does the job there.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV})


def _copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as source, open(dst, "xb") as sink:
        shutil.copyfileobj(source, sink, 1024 * 1024)
        sink.flush()
        os.fsync(sink.fileno())
    shutil.copystat(src, dst)


@dataclass
class ProgramFiles:
    """Renames, replaces and removals of program files, failing with :class:`FileOperationError`.

    ``fail`` is a test hook: ``{"rename": errno.EROFS}`` makes every ``rename`` fail with that
    errno before touching the disk. Production code never sets it.
    """

    fail: dict[str, int] | None = None

    def _check(self, op: str, *paths: Path) -> None:
        if self.fail and op in self.fail:
            code = self.fail[op]
            raise FileOperationError(op, paths, OSError(code, os.strerror(code)))

    def rename(self, src: Path, dst: Path) -> None:
        self._check("rename", src, dst)
        try:
            os.rename(src, dst)
        except OSError as e:
            raise FileOperationError("rename", (src, dst), e) from None

    def replace(self, src: Path, dst: Path) -> None:
        # Go's os.Rename replaces an existing target, and says "rename" either way.
        self._check("rename", src, dst)
        try:
            os.replace(src, dst)
        except OSError as e:
            raise FileOperationError("rename", (src, dst), e) from None

    def keep_copy(self, src: Path, dst: Path) -> None:
        """Make ``dst`` a second name for ``src`` (a hard link; a copy where the filesystem
        has none), replacing ``dst``: ``src`` never stops existing. Errors say ``rename``, the
        step's name in the Go agent's texts."""
        self._check("rename", src, dst)
        tmp = dst.with_name(f".{dst.name}.tmp")
        try:
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
            except OSError as e:
                if e.errno not in _NO_HARD_LINKS:
                    raise
                _copy(src, tmp)
            os.replace(tmp, dst)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise FileOperationError("rename", (src, dst), e) from None

    def remove(self, path: Path) -> None:
        self._check("remove", path)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as e:
            raise FileOperationError("remove", (path,), e) from None

    def sync_dir(self, directory: Path) -> None:
        try:
            fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def _is_zipapp(path: Path) -> bool:
    """A zip archive ends with its end-of-central-directory record (no archive comment in ours:
    both the project's builder and shiv write none)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(-22, os.SEEK_END)
            return handle.read(4) == _EOCD
    except OSError:
        return False


def running_program() -> Path | None:
    """The single-file build this process runs from, or ``None`` (``python -m agent``, a
    console script): only a single-file build can be swapped for another one."""
    if not sys.argv or not sys.argv[0]:
        return None
    path = Path(sys.argv[0]).absolute()
    if path.is_file() and _is_zipapp(path):
        return path
    return None


@dataclass(frozen=True)
class SelfUpdateBlocker:
    """Why ``self_update`` cannot work here: ``kind`` for the Console (on every heartbeat and in
    a rejection), ``text`` for people (the agent's log and the rejection's ``error``)."""

    kind: CommandFailureKind
    text: str

    def __str__(self) -> str:
        return self.text


def self_update_blocker(
    agent_type: AgentType, path: Path | None, *, signing_key: bool = True
) -> SelfUpdateBlocker | None:
    """Why ``self_update`` cannot work here, or ``None`` when it can."""
    if agent_type is not AgentType.HOST:
        return SelfUpdateBlocker(
            CommandFailureKind.NOT_SELF_UPDATABLE,
            f"{agent_type} agents are upgraded by helm upgrade, not self_update",
        )
    if not signing_key:
        return SelfUpdateBlocker(
            CommandFailureKind.NO_SIGNING_KEY,
            "no signing public key configured: refusing to install unsigned builds",
        )
    if path is None:
        argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "?"
        return SelfUpdateBlocker(
            CommandFailureKind.NOT_SINGLE_FILE_BUILD,
            f"this agent does not run from a single-file build (started as {argv0}); "
            "self_update replaces the build it runs from",
        )
    directory = path.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        return SelfUpdateBlocker(
            CommandFailureKind.READ_ONLY_PROGRAM,
            f"the program directory {directory} is not writable",
        )
    if path.exists() and not os.access(path, os.W_OK):
        return SelfUpdateBlocker(
            CommandFailureKind.READ_ONLY_PROGRAM, f"the program file {path} is not writable"
        )
    return None


def can_self_update(
    agent_type: AgentType, path: Path | None = None, *, signing_key: bool = True
) -> bool:
    """Whether ``self_update`` could swap the program file in place.

    Kubernetes agents are upgraded by ``helm upgrade``, never in place. A host agent can when it
    runs from a single-file build whose file and directory are writable (a read-only image layer
    or a root-owned ``/usr/local/bin`` under a non-root user is not), and a signing key is set.
    """
    return self_update_blocker(agent_type, path, signing_key=signing_key) is None
