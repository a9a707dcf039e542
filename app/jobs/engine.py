"""The job engine. Huey keeps queued and scheduled tasks in its storage, so they survive restarts: a SQLite file
beside the database by default (one machine, no other service), Redis when REDIS_URL is set (workers on any
number of machines share one queue). The web process and the workers build the same engine from the same
settings, so a task one enqueues is one the other knows.

Huey does not acknowledge tasks: a worker killed mid-task loses that task. Work that must not be lost records
its own progress in the database and is re-enqueued from there (each package's tasks say how)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from huey import Huey, PriorityRedisHuey, SqliteHuey

from app.settings import Settings

ENGINE_NAME = "forecast-jobs"


def jobs_sqlite_path(settings: Settings) -> Path:
    """Beside a SQLite database (so each database has its own queue), else in the data directory."""
    database = settings.sqlite_path
    if database is not None:
        return database.with_name(database.stem + ".jobs.sqlite3")
    return settings.data_dir / "jobs.sqlite3"


def _registrars() -> tuple[Callable[[Huey, Settings], None], ...]:
    # Each package that runs background work exposes register(engine, settings); listed here, once.
    from app.batches import tasks as batch_tasks
    from app.monitors import prometheus

    return (batch_tasks.register, prometheus.register)


def build_engine(settings: Settings) -> Huey:
    engine: Huey
    if settings.redis_url:
        # The priority flavour: the Prometheus poller outranks batch chunks (plain Redis storage refuses priorities).
        engine = PriorityRedisHuey(ENGINE_NAME, url=settings.redis_url, results=False)
    else:
        path = jobs_sqlite_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = SqliteHuey(ENGINE_NAME, filename=str(path), results=False)
    for register in _registrars():
        register(engine, settings)
    return engine
