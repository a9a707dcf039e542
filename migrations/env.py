"""Alembic environment.

The app's own commands (`flask --app wsgi db ...`) and the tests hand the database URL over in
``config.attributes``; plain ``alembic`` (``alembic upgrade head`` from the repository root, or from this
directory) reads it from the same environment the service reads (``DATABASE_URL``, ``DATA_DIR``), through
the app's Settings.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import replace
from logging.config import fileConfig
from pathlib import Path

from alembic import context
from sqlalchemy import MetaData, create_engine, pool

REPO_ROOT = Path(__file__).resolve().parent.parent

config = context.config


def load_models() -> MetaData:
    """Every table the app declares: each package keeps its tables in a `records` module."""
    from app.db import metadata

    package_root = REPO_ROOT / "app"
    for path in sorted(package_root.rglob("records.py")):
        module = ".".join(("app", *path.relative_to(package_root).with_suffix("").parts))
        importlib.import_module(module)
    return metadata


def database_url() -> str:
    url = config.attributes.get("database_url")
    if url:
        return url
    from app.settings import Settings

    settings = Settings.from_env()
    if not os.environ.get("DATABASE_URL") and not os.environ.get("DATA_DIR"):
        # The server started from the repository root keeps its SQLite file in ./instance; alembic run from
        # migrations/ must migrate that file, not one in migrations/instance.
        settings = replace(settings, database_url=f"sqlite:///{REPO_ROOT / 'instance' / 'forecast.sqlite3'}")
    sqlite_path = settings.sqlite_path
    if sqlite_path is not None:
        sqlite_path.parent.mkdir(parents=True, exist_ok=True)
    return settings.database_url_for_sqlalchemy


def run_migrations() -> None:
    if config.config_file_name is not None:
        # Plain `alembic`: its ini file says how to log; the app's commands keep the app's logging.
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    target_metadata = load_models()
    url = database_url()
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
