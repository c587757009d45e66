"""Engine, sessions and migrations."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from console.core.files import private_dir, private_file

MIGRATIONS_DIR = Path(__file__).parent.parent / "migrations"


def _ensure_sqlite_dir(url: str) -> None:
    """The SQLite file and its directory private (0600/0700) before SQLite opens it: its WAL
    and shared-memory files take the database file's mode."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1].split("?", 1)[0]
        if path and path != ":memory:" and not path.startswith("file:"):
            private_dir(Path(path).parent)
            private_file(Path(path))
            for side in ("-wal", "-shm"):
                if Path(path + side).exists():
                    private_file(Path(path + side))


def make_engine(url: str) -> Engine:
    kwargs: dict[str, Any] = {}
    _ensure_sqlite_dir(url)
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    else:
        kwargs["pool_size"] = 10
        kwargs["max_overflow"] = 20
        kwargs["pool_pre_ping"] = True
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    return engine


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str, *, data_dir: Path | None = None) -> None:
    """Bring the schema to the newest revision (a no-op when it is there already).
    ``data_dir``: where revision 0011 finds the builds hosted on disk before it."""
    _ensure_sqlite_dir(url)
    cfg = alembic_config(url)
    if data_dir is not None:
        cfg.attributes["data_dir"] = data_dir
    command.upgrade(cfg, "head")


def sessions(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session
