"""A throwaway PostgreSQL cluster on 127.0.0.1 from Debian's postgresql package.

initdb refuses to run as root, so as root the cluster is created and run as ``postgres``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from testkit.net import free_port


class PostgresUnavailableError(RuntimeError):
    pass


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise PostgresUnavailableError(
            "PostgreSQL is not installed (Debian package postgresql); .ci/run installs it"
        )
    return Path(found[-1]).parent


class ThrowawayPostgres:
    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="proxima-pg-"))
        self.datadir = self.root / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        self._dbs = 0

    def _run(self, *args: str) -> None:
        cmd = list(args)
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._initdb()
        self.resume()

    def _initdb(self) -> None:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.datadir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )

    def resume(self) -> None:
        """Start the server (again, after :meth:`halt`) on the same port and data."""
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.root / "log"),
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200",
            "-w",
            "start",
        )

    def halt(self) -> None:
        """Stop the server as a crash would (``immediate``: connections cut, no checkpoint),
        keeping its data for :meth:`resume`. For fault tests on a cluster of their own."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop")

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        import psycopg

        self._dbs += 1
        name = f"proxima_{self._dbs}_{int(time.time() * 1000) % 100000}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(
                str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"
            )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
