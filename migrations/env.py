"""Alembic environment: the URL comes from the app's settings, never from a file."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from app.db import Base
from app.keys import records  # noqa: F401  (registers the tables on Base.metadata)

config = context.config
target_metadata = Base.metadata


def run_migrations() -> None:
    url = config.attributes["database_url"]
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
