"""POST /anomalies and POST /anomalies/last: thin views over the schemas and the detection service."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Blueprint, Response, request

from app.anomalies import service
from app.anomalies.schemas import AnomalyRequest, CheckedSeries, check_series, load_request
from app.compute.detect.results import DetectionResult
from app.services import current_services
from app.web.body import read_json as read_json_body
from app.web.pipeline import requires
from app.web.pool_work import compute_on_pool

bp = Blueprint("anomalies", __name__)


def _read() -> tuple[AnomalyRequest, CheckedSeries]:
    settings = current_services().settings
    anomaly_request = load_request(read_json_body(settings.max_body_bytes), request.headers)
    return anomaly_request, check_series(anomaly_request, max_points=settings.max_points)


def _run_on_pool(work: Any) -> Any:
    return compute_on_pool(current_services().pool, work, failure="Anomaly detection failed")


def _detect(anomaly_request: AnomalyRequest, series: CheckedSeries, start: int = 0) -> DetectionResult:
    return service.detect(series.epoch_seconds, series.values, data_frequency=anomaly_request.data_frequency,
                          confidence=anomaly_request.confidence, detector=anomaly_request.detector,
                          false_alarms_per_week=anomaly_request.false_alarms_per_week,
                          start=start, run=_run_on_pool)


def _respond(body: dict[str, object], detector: str, result: DetectionResult) -> Response:
    # orjson: every number a detector returns is finite (checked in the worker), so its output is the standard
    # library's; the app's provider would send any body holding null (every answer has direction) to json.
    response = Response(orjson.dumps(body) + b"\n", mimetype="application/json")
    response.headers["X-Model-Id"] = detector
    if result.fallback:
        response.headers[service.FALLBACK_HEADER] = result.fallback
    return response


@bp.post("/anomalies")
@requires("read")
def detect_series() -> Response:
    anomaly_request, series = _read()
    result = _detect(anomaly_request, series)
    return _respond(service.verdicts(series.timestamps, series, result), anomaly_request.detector, result)


@bp.post("/anomalies/last")
@requires("read")
def detect_last() -> Response:
    anomaly_request, series = _read()
    last = len(series.values) - 1
    result = _detect(anomaly_request, series, start=last)
    body = service.last_verdict(series.timestamps[last], series, result)
    return _respond(body, anomaly_request.detector, result)
