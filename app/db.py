"""The SQLAlchemy engine and sessions; schema changes go through Alembic (migrations/), never create_all."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    DateTime,
    Dialect,
    Engine,
    Executable,
    MetaData,
    TypeDecorator,
    create_engine,
    event,
    text,
)

from app.settings import Settings

log = logging.getLogger("app.db")

# How often a serving process copies SQLite's write-ahead log into the database (WalCheckpointer).
CHECKPOINT_SECONDS = 1.0


# Every table: each package declares its own in a `records` module (Core tables: the ORM adds to a process's
# imports and puts its unit-of-work machinery between every request and the database).
metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC (SQLite has no zones) and always hands back aware UTC datetimes."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Database:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        sqlite_path = settings.sqlite_path
        if sqlite_path is None and settings.database_url_for_sqlalchemy.startswith("sqlite"):
            # Each connection would get its own empty database: keys made by `keys create` would never be seen.
            raise ValueError(
                "DATABASE_URL must name a SQLite file (sqlite:////absolute/path/keys.sqlite3); an in-memory "
                "SQLite database cannot be shared by the server's connections and the admin commands."
            )
        if sqlite_path is not None:
            sqlite_path.parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(
                settings.database_url_for_sqlalchemy,
                connect_args={"check_same_thread": False, "timeout": 30},
            )
            event.listen(self.engine, "connect", self._tune_sqlite)
        else:
            self.engine = create_engine(
                settings.database_url_for_sqlalchemy,
                pool_pre_ping=True,
                pool_size=10,
                max_overflow=10,
                pool_timeout=5,
                connect_args={"connect_timeout": 5},
            )

        self.checkpointer: WalCheckpointer | None = None

    def _tune_sqlite(self, dbapi_connection: Any, _record: object) -> None:
        # WAL lets the CLI write (revoke, rotate) while the server reads, without "database is locked".
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        if self.checkpointer is not None:
            cursor.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's thread does it
        cursor.close()

    def checkpoint_in_background(self) -> None:
        """SQLite only, for a serving process: its connections leave the write-ahead log to a thread that
        checkpoints it every CHECKPOINT_SECONDS (WalCheckpointer says why). Idempotent; restarts a thread a fork
        left behind."""
        if self.settings.sqlite_path is None:
            return
        if self.checkpointer is None:
            self.checkpointer = WalCheckpointer(self.engine)
            self.engine.dispose()  # pooled connections made before keep checkpointing in their commits
        self.checkpointer.start()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A connection inside one transaction: committed when the block ends, rolled back if it raises."""
        with self.engine.begin() as connection:
            yield connection

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def dispose(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.stop()
        self.engine.dispose()


class WalCheckpointer:
    """Copies SQLite's write-ahead log into the database every CHECKPOINT_SECONDS, from a thread of its own.

    By default the commit that takes the log past 1,000 pages does it. A fleet's append (one point for each of
    2,000 series) changes a page per series and so passes that in every commit, and the copy with its two fsyncs
    ran inside that commit, while the process's write lock
    (app.monitors.state.runtime) was held: every other append waited for it. A passive checkpoint waits for no
    writer and no reader; the log holds about a second of writes."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._stopping = threading.Event()
        self._starting = threading.Lock()  # request threads of a forked child may all find the thread gone
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._starting:
            if self.running():
                return
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint", daemon=True)
            self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.wait(CHECKPOINT_SECONDS):
            self.checkpoint()

    def checkpoint(self) -> None:
        try:
            with self._engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except Exception:  # a locked or vanished file is tried again next time; serving goes on
            log.warning("sqlite checkpoint failed", exc_info=True)


def dialect_insert(dialect: str, table: Any) -> Any:
    """An INSERT into ``table`` in the dialect's own form (it has ON CONFLICT), imported here so a process loads
    only the dialect of the database it is configured with."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    else:  # pragma: no cover - the service ships for SQLite and PostgreSQL only
        raise RuntimeError(f"an insert with ON CONFLICT needs SQLite or PostgreSQL, not {dialect}")
    return insert(table)


class Prepared:
    """One fixed Core statement, compiled once per dialect and run on the DBAPI cursor of a Core connection.

    For the few statements a hot path runs on every request: SQLAlchemy's own execution (parameter processing,
    execution context, result wrapping) is more work than the database's own for a one-row statement.
    Parameters still go through each column type's bind processor (a UTC datetime becomes what the dialect
    stores); rows come back as the driver's plain tuples, so a statement whose columns need a result
    processor (booleans on SQLite, UTCDateTime) should not be read this way. The caller's connection must have
    begun its transaction (``Connection.begin()``): the cursor then works inside it.
    """

    def __init__(self, statement: Executable) -> None:
        self._statement = statement
        self._by_dialect: dict[str, _Compiled] = {}

    def execute(self, connection: Connection, params: Mapping[str, Any] | None = None) -> Any:
        """Runs the statement with ``params`` (bind names to values); returns the DBAPI cursor."""
        compiled = self._compiled(connection.dialect)
        cursor = connection.connection.cursor()
        cursor.execute(compiled.sql, compiled.parameters(params or {}))
        return cursor

    def executemany(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> Any:
        compiled = self._compiled(connection.dialect)
        cursor = connection.connection.cursor()
        cursor.executemany(compiled.sql, [compiled.parameters(row) for row in rows])
        return cursor

    def executemany_rows(self, connection: Connection, names: tuple[str, ...], rows: Sequence[Sequence[Any]]
                         ) -> Any:
        """As executemany, with each row a sequence of the values of ``names`` in that order: for the thousands of
        rows of one batch, without a dict per row."""
        compiled = self._compiled(connection.dialect)
        cursor = connection.connection.cursor()
        cursor.executemany(compiled.sql, compiled.row_parameters(names, rows))
        return cursor

    def insert_rows(self, connection: Connection, names: tuple[str, ...], rows: Sequence[Sequence[Any]]) -> None:
        """An INSERT's rows, as executemany_rows; on SQLite in statements of many rows each. The sqlite3 module
        lets go of the GIL for every row of an executemany, and a thread that lets go of it waits up to the switch
        interval (5 ms) to get it back while another thread computes: a 2,000-point append held SQLite's one
        writer (this process's write lock) for up to an interval a row, and every single-point append meanwhile
        waited for it (bench/remote_write.py). A few statements of many rows let go of the GIL a few times."""
        compiled = self._compiled(connection.dialect)
        if connection.dialect.name != "sqlite" or compiled.order is None:
            self.executemany_rows(connection, names, rows)
            return
        head, values, placeholders = compiled.sql.rpartition(" VALUES ")
        _in_statements(connection, compiled.row_parameters(names, rows), len(compiled.order),
                       lambda count: f"{head}{values}{', '.join([placeholders] * count)}")

    def update_rows(self, connection: Connection, names: tuple[str, ...], rows: Sequence[Sequence[Any]]) -> int:
        """An UPDATE for each row, as executemany_rows; the rows it changed. On SQLite one statement joins the
        rows as a VALUES table (UPDATE ... FROM, SQLite 3.33 and later), for the reason insert_rows gives."""
        compiled = self._compiled(connection.dialect)
        pieces = compiled.sql.split("?")
        sqlite_version = getattr(connection.dialect.dbapi, "sqlite_version_info", (0,))
        if (connection.dialect.name != "sqlite" or compiled.order is None or len(rows) < 2
                or sqlite_version < (3, 33) or len(pieces) != len(compiled.order) + 1
                or compiled.sql.count(" WHERE ") != 1):
            return self.executemany_rows(connection, names, rows).rowcount
        width = len(compiled.order)
        # Each placeholder becomes its column of the VALUES table (SQLite names them column1, column2, ...).
        joined = pieces[0] + "".join(f"rows.column{i + 1}{piece}" for i, piece in enumerate(pieces[1:]))
        head, where, condition = joined.partition(" WHERE ")
        row = "(" + ", ".join("?" * width) + ")"
        return _in_statements(
            connection, compiled.row_parameters(names, rows), width,
            lambda count: f"{head} FROM (VALUES {', '.join([row] * count)}) AS rows{where}{condition}")

    def _compiled(self, dialect: Dialect) -> _Compiled:
        compiled = self._by_dialect.get(dialect.name)
        if compiled is None:
            compiled = self._by_dialect[dialect.name] = _Compiled(self._statement, dialect)
        return compiled


# The most parameters one SQLite statement takes (SQLITE_MAX_VARIABLE_NUMBER's default since SQLite 3.32).
SQLITE_MAX_VARIABLES = 32_766


def _in_statements(connection: Connection, parameters: Sequence[Sequence[Any]], width: int,
                   statement: Callable[[int], str]) -> int:
    """Runs ``statement(count)`` (its text for ``count`` rows of ``width`` parameters) over the rows, as many a
    statement as SQLite takes; the rows they changed."""
    per_statement = max(1, SQLITE_MAX_VARIABLES // max(1, width))
    changed = 0
    cursor = connection.connection.cursor()
    for start in range(0, len(parameters), per_statement):
        chunk = parameters[start:start + per_statement]
        cursor.execute(statement(len(chunk)), [value for row in chunk for value in row])
        changed += max(0, cursor.rowcount)
    cursor.close()
    return changed


class _Compiled:
    def __init__(self, statement: Executable, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
        self.sql = str(compiled)
        # Values fixed in the statement itself (a literal LIMIT is a bound parameter too).
        self.defaults = {name: bind.effective_value for name, bind in compiled.binds.items()
                         if not bind.required and not name.startswith("%(")}
        self.order: list[str] | None = list(compiled.positiontup) if compiled.positional else None
        self.processors: dict[str, Callable[[Any], Any]] = {}
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                self.processors[name] = processor
        # Positional (SQLite): each processor by its parameter's place.
        self.placed = [(index, self.processors[name]) for index, name in enumerate(self.order or ())
                       if name in self.processors]

    def row_parameters(self, names: tuple[str, ...], rows: Sequence[Sequence[Any]]) -> list[Any]:
        processors = [(i, self.processors[name]) for i, name in enumerate(names) if name in self.processors]
        if processors:
            rows = [list(row) for row in rows]
            for index, processor in processors:
                # A column's rows often repeat one value (a batch's time, a flag): processed once per run.
                last_in: Any = object()
                last_out: Any = None
                for row in rows:
                    value = row[index]
                    if value is not last_in:
                        last_in, last_out = value, processor(value)
                    row[index] = last_out
        if self.order is None:
            return [{**self.defaults, **dict(zip(names, row, strict=True))} if self.defaults
                    else dict(zip(names, row, strict=True)) for row in rows]
        if list(names) == self.order:
            return list(rows)
        position = {name: i for i, name in enumerate(names)}
        picks = [position[name] for name in self.order]
        return [[row[i] for i in picks] for row in rows]

    def parameters(self, given: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        if self.order is not None:
            defaults = self.defaults
            values = [given[name] if name in given else defaults[name] for name in self.order]
            for index, processor in self.placed:
                values[index] = processor(values[index])
            return values
        named = {**self.defaults, **given} if self.defaults else dict(given)
        for name, processor in self.processors.items():
            if name in named:
                named[name] = processor(named[name])
        return named
