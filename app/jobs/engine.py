"""The job engine. Huey keeps queued and scheduled tasks in its storage, so they survive restarts: a SQLite file
beside the database by default (one machine, no other service), Redis when REDIS_URL is set (workers on any
number of machines share one queue). The web process and the workers build the same engine from the same
settings, so a task one enqueues is one the other knows.

Huey does not acknowledge tasks: a worker killed mid-task loses that task. Work that must not be lost records
its own progress in the database and is re-enqueued from there (each package's tasks say how)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from app.settings import Settings

if TYPE_CHECKING:
    from huey import Huey

# What a package that runs background work hands the engine: register(engine, settings) declares its tasks.
Registrar = Callable[["Huey", Settings], None]

ENGINE_NAME = "forecast-jobs"


def jobs_sqlite_path(settings: Settings) -> Path:
    """Beside a SQLite database (so each database has its own queue), else in the data directory."""
    database = settings.sqlite_path
    if database is not None:
        return database.with_name(database.stem + ".jobs.sqlite3")
    return settings.data_dir / "jobs.sqlite3"


def build_engine(settings: Settings, *, registrars: Iterable[Registrar] = ()) -> Huey:
    """The engine with the tasks of every package in ``registrars`` (the composition root lists them, so the
    engine knows none of its users). Huey and the storage's client load here, not when this module does."""
    from huey import PriorityRedisHuey, SqliteHuey

    engine: Huey
    if settings.redis_url:
        # The priority flavour: the Prometheus poller outranks batch chunks (plain Redis storage refuses priorities).
        engine = PriorityRedisHuey(ENGINE_NAME, url=settings.redis_url, results=False)
    else:
        path = jobs_sqlite_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = SqliteHuey(ENGINE_NAME, filename=str(path), results=False)
    for register in registrars:
        register(engine, settings)
    return engine
