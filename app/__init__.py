"""The application factory: settings, extensions and blueprints are wired here and nowhere else."""

from __future__ import annotations

import atexit

from app.forecast.pool import pin_blas_threads

pin_blas_threads()

from flask import Flask  # noqa: E402
from werkzeug.middleware.proxy_fix import ProxyFix  # noqa: E402

from app.settings import Settings  # noqa: E402


def create_app(settings: Settings | None = None, *, start_workers: bool = False) -> Flask:
    from app import auth, cors, errors, health, metrics, observability, openapi, ratelimit, verify
    from app.anomalies import routes as anomaly_routes
    from app.cli import register_cli
    from app.db import Database
    from app.forecast import routes as forecast_routes
    from app.forecast.pool import ForecastPool
    from app.keys import api as keys_api
    from app.keys.store import KeyStore, UsageRecorder
    from app.services import Services

    settings = settings or Settings.from_env()
    observability.configure_logging(settings.log_level)

    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["TESTING"] = settings.testing
    app.json.sort_keys = False  # type: ignore[attr-defined]
    if settings.trusted_proxies > 0:
        hops = settings.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops, x_port=hops)  # type: ignore[method-assign]

    database = Database(settings)
    services = Services(
        settings=settings,
        database=database,
        keys=KeyStore(database, cache_seconds=settings.key_cache_seconds),
        usage=UsageRecorder(database, flush_seconds=settings.usage_flush_seconds),
        pool=ForecastPool(
            workers=settings.forecast_workers,
            timeout_seconds=settings.forecast_timeout_seconds,
            queue_limit=settings.forecast_queue_limit,
        ),
    )
    app.extensions["forecast_service"] = services

    # Hook order is the D1 check order: request id, HTTPS, key, rate limit, permission, then the view.
    observability.init_request_tracking(app)
    auth.init_auth(app)
    ratelimit.init_rate_limits(app)
    auth.init_permission_check(app)
    errors.register_error_handlers(app)
    metrics.init_metrics(app)
    cors.init_cors(app, settings.cors_origins)

    app.register_blueprint(health.bp)
    app.register_blueprint(verify.bp)
    app.register_blueprint(keys_api.bp)
    app.register_blueprint(forecast_routes.bp)
    app.register_blueprint(forecast_routes.meta)
    app.register_blueprint(anomaly_routes.bp)
    app.register_blueprint(openapi.bp)
    app.register_blueprint(metrics.bp)
    register_cli(app)

    if start_workers:
        services.pool.start()
    atexit.register(services.close)
    return app
