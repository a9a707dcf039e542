"""Gunicorn reads this file from the working directory, so `gunicorn wsgi:app` gets the D6.2 defaults."""

from __future__ import annotations

import os
import sys
from typing import Any

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# An explicit BIND wins; a PaaS hands us only PORT and expects every interface; otherwise loopback.
if os.environ.get("BIND"):
    bind = [os.environ["BIND"]]
elif os.environ.get("PORT"):
    bind = [f"0.0.0.0:{os.environ['PORT']}"]
else:
    bind = ["127.0.0.1:8000"]

# D6.2: one process by default so in-memory rate limits are exact; threads give concurrency.
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
worker_class = "gthread"
# Longer than the forecast timeout, so a slow forecast gets its 500 from us, not a killed worker.
timeout = int(float(os.environ.get("FORECAST_TIMEOUT_SECONDS", "30"))) + 30
graceful_timeout = timeout
keepalive = 5
accesslog = None
errorlog = "-"


def on_starting(server: Any) -> None:
    if server.cfg.workers > 1 and not os.environ.get("REDIS_URL"):
        sys.stderr.write(
            f"refusing to start {server.cfg.workers} worker processes without REDIS_URL: each process would keep "
            "its own rate-limit counters and every limit would silently multiply. Set REDIS_URL (D6.3) or run "
            "one worker (WEB_CONCURRENCY=1) with more threads (GUNICORN_THREADS).\n"
        )
        sys.exit(2)


def worker_exit(server: Any, worker: Any) -> None:
    # D2.5: usage counts still in memory reach the database before the process goes.
    app = getattr(worker, "wsgi", None)
    services = getattr(app, "extensions", {}).get("forecast_service") if app is not None else None
    if services is not None:
        services.close()
