"""The application factory: settings, extensions and blueprints are wired here and nowhere else."""

from __future__ import annotations

import atexit
from collections.abc import Callable

from app.compute.pool import pin_blas_threads

pin_blas_threads()

from flask import Flask  # noqa: E402
from werkzeug.middleware.proxy_fix import ProxyFix  # noqa: E402

from app.settings import Settings  # noqa: E402


def create_app(settings: Settings | None = None, *, start_workers: bool = False) -> Flask:
    from app import monitors
    from app.anomalies import routes as anomaly_routes
    from app.batches import routes as batch_routes
    from app.batches import tasks as batch_tasks
    from app.compat.azure import routes as azure_routes
    from app.compat.nixtla import routes as nixtla_routes
    from app.compute.pool import WorkerPool
    from app.dashboard import key_pages, work_pages  # noqa: F401  (their pages join the dashboard's blueprint)
    from app.dashboard import sessions as dashboard_sessions
    from app.dashboard import views as dashboard_views
    from app.db import Database
    from app.db_cli import db_cli
    from app.forecast import routes as forecast_routes
    from app.jobs.cli import jobs_cli
    from app.jobs.engine import build_engine
    from app.keys import routes as keys_routes
    from app.keys.cli import keys_cli
    from app.keys.store import KeyStore
    from app.keys.usage import UsageRecorder
    from app.services import Services
    from app.web import cors, errors, jsonio, metrics, observability, pipeline
    from app.web import routes as service_routes
    from app.web.openapi import init_openapi
    from app.web.ratelimit import init_rate_limits

    settings = settings or Settings.from_env()
    observability.configure_logging(settings.log_level)

    app = Flask(__name__)
    app.json = jsonio.OrjsonProvider(app)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["TESTING"] = settings.testing
    app.json.sort_keys = False  # type: ignore[attr-defined]
    if settings.trusted_proxies > 0:
        hops = settings.trusted_proxies
        # Only the headers the app uses (client address, scheme); a forged X-Forwarded-Host/-Port changes nothing.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]

    database = Database(settings)
    services = Services(
        settings=settings,
        database=database,
        keys=KeyStore(database, cache_seconds=settings.key_cache_seconds),
        usage=UsageRecorder(database, flush_seconds=settings.usage_flush_seconds),
        pool=WorkerPool(
            workers=settings.forecast_workers,
            timeout_seconds=settings.forecast_timeout_seconds,
            queue_limit=settings.forecast_queue_limit,
            warm_up="app.compute.forecast.work:warm_up",
            on_ready_change=metrics.WORKERS_READY.set,
        ),
        limits=init_rate_limits(app, settings),
        build_jobs=lambda: build_engine(settings, registrars=(batch_tasks.register, monitors.register_tasks)),
    )
    app.extensions["forecast_service"] = services

    # The request id comes first so every later answer and log line carries it; app.web.pipeline then
    # runs the checks in their documented order.
    observability.init_request_tracking(app)
    pipeline.init_pipeline(app)
    errors.register_error_handlers(app)
    metrics.init_metrics(app)
    cors.init_cors(app, settings.cors_origins)

    app.register_blueprint(service_routes.bp)
    app.register_blueprint(keys_routes.bp)
    app.register_blueprint(dashboard_views.bp)
    dashboard_sessions.register_identity_source(app, services.database, services.keys)
    app.register_blueprint(forecast_routes.bp)
    app.register_blueprint(forecast_routes.meta)
    app.register_blueprint(anomaly_routes.bp)
    app.register_blueprint(azure_routes.bp)
    app.register_blueprint(nixtla_routes.bp)
    app.register_blueprint(batch_routes.bp)
    monitors.init_app(app, start_sender=start_workers)
    init_openapi(app, openapi_documenters())
    for commands in (jobs_cli, keys_cli, db_cli):
        app.cli.add_command(commands)

    if start_workers:
        services.warm_up()
    atexit.register(services.close)
    return app


def openapi_documenters() -> tuple[Callable[..., None], ...]:
    """Each capability's part of the OpenAPI document, in the document's order."""
    from app.anomalies import openapi_doc as anomaly_docs
    from app.batches import openapi_doc as batch_docs
    from app.compat.azure import openapi_doc as azure_docs
    from app.compat.nixtla import openapi_doc as nixtla_docs
    from app.forecast import openapi_doc as forecast_docs
    from app.keys import openapi_doc as keys_docs
    from app.monitors import openapi_doc as monitor_docs

    return (forecast_docs.document, keys_docs.document, monitor_docs.document,
            anomaly_docs.document, azure_docs.document, nixtla_docs.document, batch_docs.document)
