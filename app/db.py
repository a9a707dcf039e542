"""The SQLAlchemy engine and sessions; schema changes go through Alembic (migrations/), never create_all."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from app.settings import Settings

log = logging.getLogger("app.db")


class Base(DeclarativeBase):
    pass


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
            event.listen(self.engine, "connect", _tune_sqlite)
        else:
            self.engine = create_engine(
                settings.database_url_for_sqlalchemy,
                pool_pre_ping=True,
                pool_size=10,
                max_overflow=10,
                pool_timeout=5,
                connect_args={"connect_timeout": 5},
            )
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def ping(self) -> None:
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


def _tune_sqlite(dbapi_connection: object, _record: object) -> None:
    # WAL lets the CLI write (revoke, rotate) while the server reads, without "database is locked".
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
