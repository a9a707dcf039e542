"""Gunicorn reads this file from the working directory, so `gunicorn wsgi:app` gets the D6.2 defaults."""

from __future__ import annotations

import os
import socket
import sys
import time
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
threads = int(os.environ.get("GUNICORN_THREADS", "32"))
worker_class = "gthread"
# Longer than the forecast timeout, so a slow forecast gets its 500 from us, not a killed worker.
timeout = int(float(os.environ.get("FORECAST_TIMEOUT_SECONDS", "30"))) + 30
graceful_timeout = timeout
keepalive = 5
# gunicorn answers a header field over limit_request_field_size (default 8190 bytes) itself, with an HTML
# 400 outside the contract. Let fields up to 16 KiB (e.g. a 10 KiB Authorization header) reach the app,
# which answers 401/400 in the SPEC 2.4 envelope; nginx in front allows the same (large_client_header_buffers).
limit_request_field_size = 16384
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
    forecast_slots = int(os.environ.get("FORECAST_WORKERS") or os.cpu_count() or 1) + int(
        os.environ.get("FORECAST_QUEUE_LIMIT") or 8
    )
    if server.cfg.threads <= forecast_slots:
        sys.stderr.write(
            f"warning: {server.cfg.threads} threads per process but up to {forecast_slots} forecasts may hold one "
            "each (FORECAST_WORKERS + FORECAST_QUEUE_LIMIT); /verify will wait behind forecasts. Raise "
            "GUNICORN_THREADS or lower FORECAST_QUEUE_LIMIT.\n"
        )


def post_worker_init(worker: Any) -> None:
    # Warm the forecast workers at start-up, so the first forecast does not pay their start.
    services = getattr(worker.wsgi, "extensions", {}).get("forecast_service")
    if services is not None:
        services.pool.start()


def worker_exit(server: Any, worker: Any) -> None:
    # D2.5: usage counts still in memory reach the database before the process goes.
    app = getattr(worker, "wsgi", None)
    services = getattr(app, "extensions", {}).get("forecast_service") if app is not None else None
    if services is not None:
        services.close()


def post_request(worker: Any, req: Any, environ: dict[str, Any], resp: Any) -> None:
    # An answer given before the app read the body (401, 403, 429, 413, 415, ...) leaves the rest of the body in
    # the socket. On a kept-alive connection gthread then sees the socket readable, hands it to a thread that
    # discards the leftover and blocks reading the next request (gunicorn issue #3301): idle keep-alive
    # connections (nginx's upstream pool, or 8 hostile clients) pin every thread and the service stops
    # answering. Reading the leftover here, in the thread that answered, leaves the socket idle in the poller,
    # where the keepalive timeout applies. The parser would read the same bytes anyway, so this costs nothing.
    body = getattr(req, "body", None)
    if body is None:
        return
    # A lingering close, as nginx does: keep reading so a client still uploading gets to read our answer,
    # but bounded in time and bytes so an endless chunked upload cannot hold this thread; past the bound the
    # socket is shut, which the worker sees as the client closing.
    budget, deadline = 64 * 1024 * 1024, time.monotonic() + 10
    try:
        while budget > 0 and time.monotonic() < deadline:
            chunk = body.read(min(65536, budget))
            if not chunk:
                return
            budget -= len(chunk)
        resp.sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # the client went away mid-body: the connection closes on its own
        return
