"""gunicorn's server hooks (gunicorn.conf.py names them): the master's start-up checks and clean-up, and each
worker's warm-up and last flush."""

from __future__ import annotations

import os
import sys
from typing import Any

from app.serving.checks import startup_report
from app.serving.config import ClientLimits
from app.serving.process import settle_collector, share_gil_promptly
from app.settings import Settings


def wipe_multiprocess_dir(directory: str | None) -> None:
    # A previous run's files would be added to this one's (prometheus_client: wipe the directory per run).
    if directory and os.path.isdir(directory):
        for name in os.listdir(directory):
            if name.endswith(".db"):
                os.remove(os.path.join(directory, name))


def on_starting(server: Any) -> None:
    wipe_multiprocess_dir(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    ClientLimits.from_env()  # a malformed value stops the start here, not in every worker
    report = startup_report(Settings.from_env(), processes=server.cfg.workers, threads=server.cfg.threads)
    for message in report.refusals + report.warnings:
        sys.stderr.write(message + "\n")
    if report.refusals:
        sys.exit(2)


def child_exit(server: Any, worker: Any) -> None:
    # A gunicorn worker that died (crashed, killed on timeout, or restarted) leaves its live gauges in the
    # Prometheus multiprocess directory; unmarked, /metrics would keep adding them to the living ones'.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def _services(worker: Any) -> Any:
    app = getattr(worker, "wsgi", None)
    return getattr(app, "extensions", {}).get("forecast_service") if app is not None else None


def post_worker_init(worker: Any) -> None:
    # Warm up at start (forecast workers, numpy), so the first request does not pay for it.
    services = _services(worker)
    if services is not None:
        services.warm_up()
    settle_collector()
    share_gil_promptly()


def worker_exit(server: Any, worker: Any) -> None:
    # Usage counts still in memory reach the database before the process goes.
    services = _services(worker)
    if services is not None:
        services.close()
