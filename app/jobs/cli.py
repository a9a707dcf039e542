"""`flask --app wsgi jobs worker`: the Huey consumer that runs batches and scheduled reads."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
from flask.cli import AppGroup

from app.services import Services, current_services

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"

jobs_cli = AppGroup("jobs", help="Run the background job worker.")


@jobs_cli.command("worker")
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: JOB_WORKERS, else the number of cores).",
)
@click.option(
    "--periodic/--no-periodic",
    default=True,
    show_default=True,
    help="Also run the scheduler of periodic tasks; scheduled tasks are idempotent, so several may run it.",
)
def jobs_worker(processes: int | None, periodic: bool) -> None:
    services = current_services()
    settings = services.settings
    behind = _schema_behind(services)
    if behind:
        raise click.ClickException(behind)
    # Huey logs every task it runs and every periodic task it enqueues at INFO: the Prometheus poller alone would
    # write a line a second. Those come at DEBUG only; the consumer's start, stop and failures stay visible.
    chatty = logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING
    logging.getLogger("huey").setLevel(chatty)
    logging.getLogger("huey.consumer").setLevel(settings.log_level)
    logging.getLogger("huey.consumer.Scheduler").setLevel(chatty)

    consumer = services.jobs.create_consumer(
        workers=processes or settings.job_workers or os.cpu_count() or 1,
        worker_type="process",
        periodic=periodic,
        # Huey polls its SQLite storage. An idle worker looks every max_delay at most: a new batch waits twice for
        # a look (its split, then its first chunk), so the delay shows in every batch's first progress, while a
        # look is one small query that an idle worker can afford often. (Redis storage blocks on the queue.)
        initial_delay=0.05,
        max_delay=0.1,
        check_worker_health=True,
        health_check_interval=5,
    )
    consumer.run()


def _schema_behind(services: Services) -> str | None:
    """Why the worker must not start on this database (its tasks would fail on every run), or None."""
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    with services.database.engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    if current == head:
        return None
    return (f"the database schema is at {current or 'nothing'} but this code needs {head}: run "
            "`flask --app wsgi db upgrade` first")
