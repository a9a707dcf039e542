"""Prometheus metrics: requests per endpoint and status, forecasts per model and outcome."""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, Response, g, request
from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "forecast_http_requests_total", "HTTP requests answered.", ["endpoint", "method", "status"]
)
REQUEST_SECONDS = Histogram(
    "forecast_http_request_duration_seconds",
    "Time from the first hook to the response, per endpoint.",
    ["endpoint"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
FORECASTS = Counter("forecast_forecasts_total", "Forecasts attempted.", ["model", "outcome"])
FORECAST_SECONDS = Histogram(
    "forecast_forecast_duration_seconds",
    "Time a forecast spent in the worker pool, queueing included.",
    ["model"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
FALLBACKS = Counter("forecast_fallbacks_total", "Forecasts answered by a fallback model.", ["model"])
REMOTE_WRITE_SAMPLES = Counter(
    "forecast_remote_write_samples_total",
    "Samples received by POST /api/v1/write, by what became of them (unmatched: no monitor's selector matches).",
    ["outcome"],
)
REJUDGED_POINTS = Counter(
    "forecast_monitor_points_rejudged_total",
    "Stored points a server process judged again to bring its cached state of a series up to date, by reason "
    "(catch_up: points another process or host stored; rebuild: no usable state, after a start, an eviction or "
    "feedback).",
    ["reason"],
)
WORKERS_READY = Gauge(
    "forecast_workers_ready", "Forecast worker processes ready in this server process.", multiprocess_mode="livesum"
)


def record_forecast(model_id: str, outcome: str, seconds: float, *, fallback: bool = False) -> None:
    FORECASTS.labels(model_id, outcome).inc()
    FORECAST_SECONDS.labels(model_id).observe(seconds)
    if fallback:
        FALLBACKS.labels(model_id).inc()


def init_metrics(app: Flask) -> None:
    # The labelled children, found once per label set (labels() checks and locks on every call); the sets are
    # bounded by the routes, methods and statuses, as the series themselves are.
    counters: dict[tuple[str, str, int], Any] = {}
    histograms: dict[str, Any] = {}

    @app.after_request
    def _count(response: Response) -> Response:
        # Label by route, never by raw path: unknown paths must not grow the series without bound.
        rule = request.url_rule
        endpoint = rule.rule if rule is not None else "unrouted"
        method, status = request.method, response.status_code
        counter = counters.get((endpoint, method, status))
        if counter is None:
            counter = counters[(endpoint, method, status)] = REQUESTS.labels(endpoint, method, str(status))
        counter.inc()
        started = g.get("started_at")
        if started is not None:
            histogram = histograms.get(endpoint)
            if histogram is None:
                histogram = histograms[endpoint] = REQUEST_SECONDS.labels(endpoint)
            histogram.observe(time.perf_counter() - started)
        return response
