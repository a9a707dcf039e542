"""The migrations build exactly the schema the ORM maps, on SQLite and on PostgreSQL, and undo cleanly.

The ORM side is every table of every module under app/ (all of them are imported), so a model added without
its migration, or a migration that drifts from its model, fails here.
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


def orm_metadata() -> MetaData:
    import app

    for module in pkgutil.walk_packages(app.__path__, "app."):
        importlib.import_module(module.name)
    from app.db import Base

    return Base.metadata


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
    metadata = orm_metadata()
    assert "api_keys" in metadata.tables
    config = alembic_config(empty_database)
    engine = create_engine(empty_database)
    try:
        command.upgrade(config, "head")
        assert schema_differences(engine, metadata) == []
        assert tables(engine) == set(metadata.tables) | {"alembic_version"}
        command.check(config)  # env.py's own view of the models agrees as well

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
        assert schema_differences(engine, orm_metadata()) == []
    finally:
        engine.dispose()
    assert "(head)" in alembic("current", cwd=ROOT / "migrations")  # migrations/alembic.ini
    alembic("-c", "migrations/alembic.ini", "downgrade", "base", cwd=ROOT)
    assert "(head)" not in alembic("current", cwd=ROOT)
