"""Gunicorn reads this file from the working directory, so `gunicorn wsgi:app` gets the documented defaults."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
import time
from typing import Any

import gunicorn
from gunicorn.glogging import Logger
from gunicorn.workers.gthread import ThreadWorker

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# An explicit BIND wins; a PaaS hands us only PORT and expects every interface; otherwise loopback.
if os.environ.get("BIND"):
    bind = [os.environ["BIND"]]
elif os.environ.get("PORT"):
    bind = [f"0.0.0.0:{os.environ['PORT']}"]
else:
    bind = ["127.0.0.1:8000"]

# One process by default so in-memory rate limits are exact; threads give concurrency.
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
threads = int(os.environ.get("GUNICORN_THREADS", "32"))
# Longer than the forecast timeout, so a slow forecast gets its 500 from us, not a killed worker.
timeout = int(float(os.environ.get("FORECAST_TIMEOUT_SECONDS", "30"))) + 30
graceful_timeout = timeout
keepalive = 5
# gunicorn answers a header field over limit_request_field_size (default 8190 bytes) itself, with an HTML
# 400 outside the contract. Let fields up to 16 KiB (e.g. a 10 KiB Authorization header) reach the app,
# which answers 401/400 in the error envelope; nginx in front allows the same (large_client_header_buffers).
limit_request_field_size = 16384
accesslog = None
errorlog = "-"
# Forwarding headers are believed in one place only: the app's ProxyFix, by TRUSTED_PROXIES hops. gunicorn's own
# defaults would mark a request from loopback secure on its X-Forwarded-Proto before the app is consulted, so any
# local process could pass REQUIRE_HTTPS with TRUSTED_PROXIES=0.
forwarded_allow_ips = ""
secure_scheme_headers: dict[str, str] = {}
forwarder_headers = ""


def _keep_large_buffers_returnable() -> None:
    """glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after a few
    100,000-point bodies their 2-3 MB buffers come from the heap, where freed memory mostly stays with the
    process. A fixed threshold keeps such buffers mmapped, returned to the system when freed. Measured once by
    hand (not in a bench suite): a web process that served four clients sending 100,000-point bodies at once
    kept 154 MiB afterwards by default, 130 MiB with this."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: its allocator has its own policy
        return
    m_mmap_threshold = -3  # from glibc's malloc.h
    mallopt(m_mmap_threshold, 128 * 1024)  # glibc's default threshold, now fixed


# Set in the master before it forks: workers inherit the allocator's settings.
_keep_large_buffers_returnable()


def on_starting(server: Any) -> None:
    multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiproc_dir and os.path.isdir(multiproc_dir):
        # A previous run's files would be added to this one's (prometheus_client: wipe the directory per run).
        for name in os.listdir(multiproc_dir):
            if name.endswith(".db"):
                os.remove(os.path.join(multiproc_dir, name))
    if server.cfg.workers > 1 and not os.environ.get("REDIS_URL"):
        sys.stderr.write(
            f"refusing to start {server.cfg.workers} worker processes without REDIS_URL: each process would keep "
            "its own rate-limit counters and every limit would silently multiply. Set REDIS_URL or run "
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


def child_exit(server: Any, worker: Any) -> None:
    # A gunicorn worker that died (crashed, killed on timeout, or restarted) leaves its live gauges in the
    # Prometheus multiprocess directory; unmarked, /metrics would keep adding them to the living ones'.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker: Any) -> None:
    # Warm up at start (forecast workers, numpy), so the first request does not pay for it.
    services = getattr(worker.wsgi, "extensions", {}).get("forecast_service")
    if services is not None:
        services.warm_up()


def worker_exit(server: Any, worker: Any) -> None:
    # Usage counts still in memory reach the database before the process goes.
    app = getattr(worker, "wsgi", None)
    services = getattr(app, "extensions", {}).get("forecast_service") if app is not None else None
    if services is not None:
        services.close()


# How long, and how much, the thread that answered early keeps reading a body the app did not read (a lingering
# close, as nginx does): a client still uploading keeps its connection, while one that pauses over a second or
# streams without end is closed (it has its answer already) and releases the thread within these bounds.
LINGER_SECONDS = 10.0
LINGER_READ_SECONDS = 1.0
LINGER_BYTES = 64 * 1024 * 1024


class KeepAliveThreadWorker(ThreadWorker):
    """gthread, with a request's unread body discarded by the thread that answered it.

    An answer given before the app read the body (401, 403, 404, 413, 415, 429) leaves the rest of the body on
    the socket. Stock gthread (gunicorn #3301) hands the connection back to its poller; the leftover bytes make
    the socket readable at once, and the thread that picks it up discards them and then blocks reading a next
    request that may never come: idle keep-alive clients (nginx's upstream pool) pin every thread. Discarding the
    body right after the answer fixes that, but gunicorn reads the socket in 8 KiB chunks, so the read that ends
    the body can also take the start of the next request into the parser's buffer; the poller only watches the
    socket and never wakes for bytes already read, so that request would wait for the keep-alive timeout and be
    dropped unanswered. So this worker serves whatever the buffer already holds in the same thread, with the
    same parser, before returning the connection to the poller.
    """

    def handle(self, conn: Any) -> tuple[bool, Any]:
        while True:
            keepalive, conn = super().handle(conn)
            if not keepalive or not self._discard_unread_body(conn):
                return False, conn
            if not _already_received(conn):
                return True, conn  # idle until the client sends more: the poller and keepalive timeout own it

    def _discard_unread_body(self, conn: Any) -> bool:
        """True when the body ended within the linger bounds (keep the connection), False to close it."""
        body = conn.parser.mesg.body
        deadline, budget = time.monotonic() + LINGER_SECONDS, LINGER_BYTES
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or budget <= 0:
                    return False
                conn.sock.settimeout(min(remaining, LINGER_READ_SECONDS))
                chunk = body.read(min(65536, budget))
                if not chunk:
                    return True
                budget -= len(chunk)
        except Exception:  # a stalled, broken or gone client: closing is the answer to each
            self.log.debug("Closing a connection whose unread request body did not end in time.")
            return False
        finally:
            try:
                conn.sock.settimeout(None)
            except OSError:
                pass


def _already_received(conn: Any) -> bool:
    """Bytes of a next request that were read (or decrypted) already, so the poller will not report them."""
    pending = getattr(conn.sock, "pending", None)  # TLS: decrypted bytes waiting inside the SSL object
    return conn.parser.unreader.buf.seek(0, os.SEEK_END) > 0 or bool(pending and pending())


# gunicorn 27 does the same itself (a bounded drain, then serving the read-ahead); 24 to 26 drain but leave the
# read-ahead unanswered, and their gthread's handle() has another shape, so this subclass is for 23 only.
worker_class = KeepAliveThreadWorker if gunicorn.version_info < (24,) else "gthread"


# gunicorn's own lines quote what a client sent ("Invalid request from ip=...: Invalid HTTP request line: ..."),
# so a key pasted into a URL could reach the log through them. Same rule as app.observability.redact_keys,
# repeated here because the master process must not import the app.
_KEY_SHAPED = re.compile(r"ak_[0-9a-fA-F]{64}")


def _redact_keys(text: str) -> str:
    return _KEY_SHAPED.sub(lambda match: f"{match[0][:11]}…{match[0][-4:]}", text)


class _RedactKeys(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _KEY_SHAPED.search(message):
            record.msg, record.args = _redact_keys(message), ()
        if record.exc_info and not record.exc_text:  # the handler's formatter uses this text as it is
            record.exc_text = _redact_keys(logging.Formatter().formatException(record.exc_info))
        return True


class KeyRedactingLogger(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            log.addFilter(_RedactKeys())


logger_class = KeyRedactingLogger
