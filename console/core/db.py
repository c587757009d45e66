"""Engine, sessions and migrations."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, create_engine

from console.core.files import private_dir, private_file
from console.core.settings import DATABASE_MAX_OVERFLOW, DATABASE_POOL_SIZE

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


def make_engine(
    url: str, *, pool_size: int = DATABASE_POOL_SIZE, max_overflow: int = DATABASE_MAX_OVERFLOW
) -> Engine:
    """The engine for ``url``. On PostgreSQL ``pool_size`` connections stay open (the Console
    passes its ``database_pool_size``); SQLite keeps SQLAlchemy's default pool (its
    connections are cheap to open, and each kept one holds a page cache)."""
    kwargs: dict[str, Any] = {}
    _ensure_sqlite_dir(url)
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    else:
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = max_overflow
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


# -- statements in the driver's own terms, for the hottest paths ---------------------------------

# A positional placeholder in each driver parameter style these statements run with.
PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}


class DriverStatement:
    """A fixed SQL text run on the session's own driver connection, in its transaction: no
    statement object, execution context or result wrapper (on the enrollment path those cost
    several times what the database does; docs/performance.md).

    The text is written with ``?`` placeholders and only this code's constants (values are
    always bound); ``columns`` convert a row's first values with the columns' own types (an
    aware UTC ``datetime`` from SQLite's text, say). Driver errors are raised as SQLAlchemy's
    (``IntegrityError``, ``OperationalError`` …), a lost connection invalidated first, as
    SQLAlchemy does for its own statements."""

    def __init__(self, sql: str, columns: tuple[Any, ...] = ()) -> None:
        self.sql = sql
        self.columns = columns
        self._built: dict[str, tuple[str, list[Any]]] = {}

    def _for(self, dialect: Any) -> tuple[str, list[Any]]:
        built = self._built.get(dialect.name)
        if built is None:
            mark = PLACEHOLDERS[dialect.paramstyle]
            sql = self.sql if mark == "?" else self.sql.replace("?", mark)
            processors = [
                c.type.dialect_impl(dialect).result_processor(dialect, None) for c in self.columns
            ]
            built = self._built[dialect.name] = (sql, processors)
        return built

    def rows(self, session: Session, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run with ``params``; every row returned, converted."""
        conn = session.connection()
        sql, processors = self._for(conn.dialect)
        raw = conn.connection.dbapi_connection
        assert raw is not None
        cursor = raw.cursor()
        try:
            cursor.execute(sql, params)
            rows = cursor.fetchall() if cursor.description is not None else []
        except conn.dialect.loaded_dbapi.Error as exc:
            _raise_as_sqlalchemy(conn, cursor, sql, params, exc)
        finally:
            cursor.close()
        if not any(processors):
            return [tuple(r) for r in rows]
        n = len(processors)
        return [
            tuple(v if p is None else p(v) for p, v in zip(processors, r, strict=False))
            + tuple(r[n:])
            for r in rows
        ]

    def first(self, session: Session, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        rows = self.rows(session, params)
        return rows[0] if rows else None


def bind_value(session: Session, column: Any, value: Any) -> Any:
    """``value`` as the driver takes it for ``column`` (a ``datetime`` as SQLite's text, say):
    the type as the dialect has it, as SQLAlchemy binds it (the column's own type alone leaves
    the conversion to the driver, which writes a different text on SQLite)."""
    process = bind_processor(column, session.connection().dialect)
    return value if process is None else process(value)


def bind_processor(column: Any, dialect: Any) -> Callable[[Any], Any] | None:
    """The conversion SQLAlchemy applies to ``column``'s values on ``dialect`` (None: the value
    goes to the driver as it is), looked up once per column and dialect: the one place fixed
    driver statements get it from."""
    key = (id(column), dialect.name)
    process = _BINDS.get(key, _UNKNOWN)
    if process is _UNKNOWN:
        process = _BINDS[key] = column.type.dialect_impl(dialect).bind_processor(dialect)
    return process  # type: ignore[no-any-return]


_BINDS: dict[tuple[int, str], Any] = {}
_UNKNOWN = object()


def _raise_as_sqlalchemy(
    conn: Any, cursor: Any, sql: str, params: tuple[Any, ...], exc: Exception
) -> NoReturn:
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, conn.connection.dbapi_connection, cursor)
    if lost:
        conn.invalidate(exc)
    raise DBAPIError.instance(
        sql,
        params,
        exc,
        dialect.loaded_dbapi.Error,
        connection_invalidated=lost,
        dialect=dialect,
    ) from exc
