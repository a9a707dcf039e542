"""Monitors: stored metric streams judged point by point as they arrive, forecast ahead, and alerted on.

The app factory wires them in with ``init_app`` and hands the job engine ``register_tasks``; both import what they
wire when called, so importing one module of the package loads neither Flask's routes nor the job engine's tasks.
"""

from __future__ import annotations

import atexit
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask
    from huey import Huey

    from app.settings import Settings


def init_app(app: Flask, *, start_sender: bool = False) -> None:
    """Builds this process's monitor runtime (``app.extensions["monitors"]``) and registers the blueprints; starts
    the alert sender when serving.

    The sender starts under gunicorn (each worker process builds its app after the fork) or when asked;
    admin CLI commands, which build the app too, never send alerts.
    """
    from app.monitors import routes
    from app.monitors.intake import routes as intake_routes
    from app.monitors.state.runtime import build_runtime

    services = app.extensions["forecast_service"]
    pool = services.pool
    runtime = build_runtime(services.database, services.settings, public_url=services.settings.public_url,
                            judge_slots=pool.size + max(1, pool.queue_limit // 2))
    app.extensions["monitors"] = runtime
    app.register_blueprint(routes.bp)
    app.register_blueprint(intake_routes.bp)
    serving = start_sender or "gunicorn.arbiter" in sys.modules
    if serving:
        runtime.sender.start()
        # Appends take turns at SQLite's one writer; its log is checkpointed beside them, not inside one.
        database = services.database
        database.checkpoint_in_background()

        @app.before_request
        def _sender_alive() -> None:
            # An app built before a fork (gunicorn --preload) has no sender or checkpoint thread in the child.
            if not runtime.sender.running():
                runtime.sender.start()
            if database.checkpointer is not None and not database.checkpointer.running():
                database.checkpointer.start()

    atexit.register(runtime.sender.stop)


def register_tasks(engine: Huey, settings: Settings) -> None:
    """The monitors' tasks on the job engine: the Prometheus poller, the Alertmanager refresh, series retirement."""
    from app.monitors.prometheus import poller

    poller.register(engine, settings)
