"""The migrations build exactly the schema the app declares, on SQLite and on PostgreSQL, and undo cleanly.

The declared side is every table of every module under app/ (all of them are imported), so a table added without
its migration, or a migration that drifts from its table, fails here.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, create_engine, inspect

from tests.support import ROOT, VENV_BIN, postgres_database


def declared_metadata() -> MetaData:
    import app

    for module in pkgutil.walk_packages(app.__path__, "app."):
        importlib.import_module(module.name)
    from app.db import metadata

    return metadata


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["database_url"] = url
    return config


def schema_differences(engine: Engine, metadata: MetaData) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, metadata)


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database no migration has touched yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'schema.sqlite3'}"
        return
    with postgres_database() as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_migrations_produce_exactly_the_orm_schema_and_undo_cleanly(empty_database: str) -> None:
    metadata = declared_metadata()
    assert "api_keys" in metadata.tables
    config = alembic_config(empty_database)
    engine = create_engine(empty_database)
    try:
        command.upgrade(config, "head")
        assert schema_differences(engine, metadata) == []
        assert tables(engine) == set(metadata.tables) | {"alembic_version"}
        command.check(config)  # env.py's own view of the tables agrees as well

        # Every revision's downgrade runs and removes what its upgrade made; then the way up again.
        revisions = list(ScriptDirectory.from_config(config).walk_revisions())
        for _ in revisions:
            command.downgrade(config, "-1")
        assert tables(engine) <= {"alembic_version"}
        command.upgrade(config, "head")
        assert schema_differences(engine, metadata) == []
    finally:
        engine.dispose()


@pytest.mark.slow
def test_plain_alembic_reads_the_service_environment(tmp_path: Path) -> None:
    database = tmp_path / "plain.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}"}

    def alembic(*args: str, cwd: Path) -> str:
        result = subprocess.run(
            [str(VENV_BIN / "alembic"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    alembic("upgrade", "head", cwd=ROOT)  # the repository's alembic.ini
    engine = create_engine(f"sqlite:///{database}")
    try:
        assert schema_differences(engine, declared_metadata()) == []
    finally:
        engine.dispose()
    assert "(head)" in alembic("current", cwd=ROOT / "migrations")  # migrations/alembic.ini
    alembic("-c", "migrations/alembic.ini", "downgrade", "base", cwd=ROOT)
    assert "(head)" not in alembic("current", cwd=ROOT)


def test_monitor_series_migration_keeps_every_stream_and_goes_back(empty_database: str) -> None:
    """0011 gives each monitor one series holding its stored stream (its points, state and event sequence); a
    Prometheus-fed monitor's series waits for the labels of the stream it follows. The downgrade puts the first
    series back on its monitor."""
    from sqlalchemy import text

    config = alembic_config(empty_database)
    engine = create_engine(empty_database)
    now = "2026-11-25 00:00:00"
    try:
        command.upgrade(config, "0010")
        with engine.begin() as connection:
            for monitor_id, selector in (("mon_pushed", None), ("mon_written", '{__name__="x"}')):
                connection.execute(text(
                    "INSERT INTO monitors (id, account_id, name, data_frequency, retention_points, webhook_secret, "
                    "created_at, updated_at, point_count, first_epoch, last_epoch, revision, relearn_revision, "
                    "event_seq, open_anomaly_epoch, remote_write_selector) VALUES (:id, 'acct', 'm', 'Minutes', 100, "
                    "'s', :now, :now, 2, 60, 120, 7, 3, 1, 120, :selector)"), {"id": monitor_id, "now": now,
                                                                             "selector": selector})
                for epoch in (60, 120):
                    connection.execute(text(
                        "INSERT INTO monitor_points (monitor_id, epoch, timestamp, value, expected, lower, upper, "
                        "score, is_anomaly, direction, warmup) VALUES (:id, :epoch, 't', 1, 1, 0, 2, 0.5, :flag, "
                        "NULL, false)"), {"id": monitor_id, "epoch": epoch, "flag": epoch == 120})
                connection.execute(text(
                    "INSERT INTO monitor_events (id, monitor_id, seq, kind, payload, webhook_url, destination, status, "
                    "attempts, created_at, next_attempt_at) VALUES (:event, :id, 1, 'anomaly', '{}', '', 'webhook', "
                    "'pending', 0, :now, :now)"), {"event": f"evt_{monitor_id}", "id": monitor_id, "now": now})
        command.upgrade(config, "head")
        with engine.begin() as connection:
            series = {row.monitor_id: row for row in connection.execute(text(
                "SELECT id, monitor_id, labels_key, labels, point_count, revision, relearn_revision, event_seq, "
                "open_anomaly_epoch FROM monitor_series"))}
            assert set(series) == {"mon_pushed", "mon_written"}
            assert series["mon_pushed"].labels == "{}" and series["mon_written"].labels is None
            for row in series.values():
                assert (row.labels_key, row.point_count, row.revision, row.relearn_revision, row.event_seq,
                        row.open_anomaly_epoch) == ("", 2, 7, 3, 1, 120)
                assert connection.execute(text("SELECT count(*) FROM monitor_points WHERE series_id = :s"),
                                          {"s": row.id}).scalar() == 2
                assert connection.execute(text("SELECT series_id FROM monitor_events WHERE monitor_id = :m"),
                                          {"m": row.monitor_id}).scalar() == row.id
            # A second series of one monitor, which the downgrade cannot keep.
            connection.execute(text(
                "INSERT INTO monitor_series (monitor_id, labels_key, labels, created_at, last_seen_at, point_count, "
                "revision, relearn_revision, event_seq) VALUES ('mon_pushed', 'k', '{\"a\":\"b\"}', :now, :now, 1, "
                "1, 0, 0)"), {"now": now})
            extra = connection.execute(text("SELECT id FROM monitor_series WHERE labels_key = 'k'")).scalar()
            connection.execute(text(
                "INSERT INTO monitor_points (monitor_id, series_id, epoch, timestamp, value, expected, lower, upper, "
                "score, is_anomaly, direction, warmup) VALUES ('mon_pushed', :s, 60, 't', 5, 1, 0, 2, 0.5, false, "
                "NULL, false)"), {"s": extra})
        command.downgrade(config, "0010")
        with engine.begin() as connection:
            rows = {row.id: row for row in connection.execute(text(
                "SELECT id, point_count, last_epoch, event_seq, open_anomaly_epoch, relearn_revision FROM monitors"))}
            assert {(r.point_count, r.last_epoch, r.event_seq, r.open_anomaly_epoch) for r in rows.values()} == {
                (2, 120, 1, 120)}
            assert all(r.relearn_revision == 8 for r in rows.values())  # every cached state is rebuilt
            values = connection.execute(text(
                "SELECT value FROM monitor_points WHERE monitor_id = 'mon_pushed' ORDER BY epoch")).scalars().all()
            assert values == [1.0, 1.0]
        command.upgrade(config, "head")
        assert schema_differences(engine, declared_metadata()) == []
    finally:
        engine.dispose()
