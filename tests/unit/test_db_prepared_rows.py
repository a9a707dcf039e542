"""Prepared.insert_rows and update_rows store and change exactly what executemany_rows does, on SQLite (many rows a
statement, in several statements when the rows outgrow one) and on PostgreSQL (executemany)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, select

from app import db as db_module
from app.db import Database, Prepared, UTCDateTime
from tests.support import settings_for

METADATA = MetaData()
ROWS = Table(
    "prepared_rows_check",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", Integer, nullable=False),
    Column("label", String(20)),
    Column("seen_at", UTCDateTime()),  # a column with a bind processor
)
INSERT = Prepared(ROWS.insert())
NAMES = ("id", "revision", "label", "seen_at")
CLAIM = Prepared(
    ROWS.update()
    .where(ROWS.c.id == bindparam("row_id"), ROWS.c.revision == bindparam("old_revision"))
    .values(revision=bindparam("new_revision"), label=bindparam("new_label"), seen_at=bindparam("new_seen_at"))
)
CLAIM_NAMES = ("row_id", "old_revision", "new_revision", "new_label", "new_seen_at")
START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def database(database_url: str) -> Any:
    database = Database(settings_for(database_url))
    METADATA.create_all(database.engine)
    yield database
    METADATA.drop_all(database.engine)
    database.dispose()


def stored(database: Database) -> list[tuple[Any, ...]]:
    with database.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(select(ROWS).order_by(ROWS.c.id))]


@pytest.mark.parametrize("per_statement_limit", [db_module.SQLITE_MAX_VARIABLES, 10])
def test_rows_inserted_then_claimed_where_their_revision_still_holds(
    database: Database, per_statement_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10 parameters a statement: two rows of four, so 25 rows take 13 statements.
    monkeypatch.setattr(db_module, "SQLITE_MAX_VARIABLES", per_statement_limit)
    rows = [(i, 1, f"row {i}" if i % 3 else None, START + timedelta(minutes=i)) for i in range(25)]
    with database.engine.connect() as connection:
        connection.begin()
        INSERT.insert_rows(connection, NAMES, rows)
        connection.commit()
    assert stored(database) == rows

    # Rows 5 and 6 were claimed by someone else first: their old revision no longer holds.
    with database.engine.connect() as connection:
        connection.begin()
        connection.execute(ROWS.update().where(ROWS.c.id.in_([5, 6])).values(revision=7))
        connection.commit()
    claims = [(i, 1, 2, f"claimed {i}", START + timedelta(days=1, minutes=i)) for i in range(25)]
    with database.engine.connect() as connection:
        connection.begin()
        changed = CLAIM.update_rows(connection, CLAIM_NAMES, claims)
        connection.commit()
    assert changed == 23
    expected = [(i, 7, f"row {i}" if i % 3 else None, START + timedelta(minutes=i)) if i in (5, 6)
                else (i, 2, f"claimed {i}", START + timedelta(days=1, minutes=i)) for i in range(25)]
    assert stored(database) == expected


def test_one_claim_and_none(database: Database) -> None:
    with database.engine.connect() as connection:
        connection.begin()
        INSERT.insert_rows(connection, NAMES, [(1, 1, "one", START)])
        INSERT.insert_rows(connection, NAMES, [])
        assert CLAIM.update_rows(connection, CLAIM_NAMES, [(1, 1, 2, "two", START)]) == 1
        assert CLAIM.update_rows(connection, CLAIM_NAMES, [(1, 1, 3, "three", START)]) == 0
        connection.commit()
    assert stored(database) == [(1, 2, "two", START)]
