"""`flask --app wsgi jobs worker`: the Huey consumer that runs batches and scheduled reads."""

from __future__ import annotations

import logging
import os

import click
from flask.cli import AppGroup

from app.services import current_services

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
    logging.getLogger("huey").setLevel(settings.log_level)

    @services.jobs.on_startup(name="warm-up")
    def warm_up() -> None:
        # Each worker process loads the numeric stack and fits once before it takes tasks: else the first series
        # it computes pays seconds for that, and a new batch's first progress waits for it.
        from app.compute.forecast.jobs import warm_up

        warm_up()

    consumer = services.jobs.create_consumer(
        workers=processes or settings.job_workers or os.cpu_count() or 1,
        worker_type="process",
        periodic=periodic,
        # Huey polls its SQLite storage; a short ceiling on the idle back-off keeps a new batch's first progress
        # within a second (Redis storage blocks on the queue instead of polling).
        initial_delay=0.05,
        max_delay=0.5,
        check_worker_health=True,
        health_check_interval=5,
    )
    consumer.run()
