"""A serving process's SQLite connections leave the write-ahead log to a thread of their own (app.db.WalCheckpointer):
no commit copies the log into the database file, and the thread does within about a second."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from app import db as db_module
from app.db import Database
from tests.support import settings_for


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Database]:
    database = Database(settings_for(f"sqlite:///{tmp_path / 'wal.sqlite3'}"))
    database.ping()  # the file exists from the first connection on
    yield database
    database.dispose()


def autocheckpoint(database: Database) -> int:
    with database.engine.connect() as connection:
        return int(connection.execute(text("PRAGMA wal_autocheckpoint")).scalar_one())


def write_pages(database: Database, rows: int) -> None:
    with database.transaction() as connection:
        connection.execute(text("CREATE TABLE IF NOT EXISTS filler (id INTEGER PRIMARY KEY, body TEXT)"))
        connection.execute(text("INSERT INTO filler (body) VALUES (:body)"), [{"body": "x" * 3000}] * rows)


def file_pages(database: Database) -> int:
    """Pages in the database file itself: a commit puts its pages in the log, a checkpoint copies them here."""
    assert database.settings.sqlite_path is not None
    return database.settings.sqlite_path.stat().st_size // 4096


def test_connections_checkpoint_in_their_commits_by_default(database: Database) -> None:
    assert autocheckpoint(database) == 1000
    assert database.checkpointer is None


def test_a_serving_database_leaves_the_log_to_its_thread(database: Database, monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 3600.0)  # the test runs the thread's step itself
    database.checkpoint_in_background()
    assert database.checkpointer is not None and database.checkpointer.running()
    assert autocheckpoint(database) == 0

    before = file_pages(database)
    write_pages(database, 1500)  # past the 1,000 pages at which a commit would have checkpointed
    assert file_pages(database) == before  # the commit left its pages in the log

    database.checkpointer.checkpoint()
    assert file_pages(database) >= before + 1500


def test_the_thread_checkpoints_on_its_own(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 0.05)
    database.checkpoint_in_background()
    before = file_pages(database)
    write_pages(database, 200)
    deadline = time.monotonic() + 10
    while file_pages(database) < before + 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert file_pages(database) >= before + 200


def test_calling_again_keeps_one_thread_and_dispose_stops_it(database: Database) -> None:
    database.checkpoint_in_background()
    checkpointer = database.checkpointer
    database.checkpoint_in_background()
    assert database.checkpointer is checkpointer
    database.dispose()
    assert checkpointer is not None and not checkpointer.running()


def test_postgresql_is_left_alone(postgres_url: str) -> None:
    database = Database(settings_for(postgres_url))
    try:
        database.checkpoint_in_background()
        assert database.checkpointer is None
    finally:
        database.dispose()
