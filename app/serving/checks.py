"""Start-up refusals and warnings, from the same settings the app reads (app/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.compute.detect.native import current_build, pure_requested
from app.settings import Settings


@dataclass(frozen=True)
class StartupReport:
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def startup_report(settings: Settings, *, processes: int, threads: int) -> StartupReport:
    report = StartupReport()
    if processes > 1 and not settings.redis_url:
        report.refusals.append(
            f"refusing to start {processes} worker processes without REDIS_URL: each process would keep its own "
            "rate-limit counters and every limit would silently multiply. Set REDIS_URL or run one worker "
            "(WEB_CONCURRENCY=1) with more threads (GUNICORN_THREADS)."
        )
    forecast_slots = settings.forecast_workers + settings.forecast_queue_limit
    if threads <= forecast_slots:
        report.warnings.append(
            f"warning: {threads} threads per process but up to {forecast_slots} forecasts may hold one each "
            "(FORECAST_WORKERS + FORECAST_QUEUE_LIMIT); /verify will wait behind forecasts. Raise GUNICORN_THREADS "
            "or lower FORECAST_QUEUE_LIMIT."
        )
    if not pure_requested() and current_build() is None:
        report.warnings.append(
            "warning: the anomaly detector runs from its Python sources, at about half the speed: there is no "
            "compiled build of them as they are now. `python -m app.compute.detect.native_build` builds it (make "
            "install does); FORECAST_PURE_DETECTOR=1 says plain Python is meant."
        )
    return report
