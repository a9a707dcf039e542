"""POST /anomalies and POST /anomalies/last: thin views over the schemas and the worker pool."""

from __future__ import annotations

import orjson
from flask import Blueprint, Response, request

from app.anomalies.schemas import AnomalyRequest, CheckedSeries, check_series, load_request
from app.compute.detect.jobs import DetectJob
from app.compute.detect.results import DetectionResult
from app.services import current_services
from app.web.body import read_json as read_json_body
from app.web.jobs import run_job
from app.web.pipeline import requires

bp = Blueprint("anomalies", __name__)

FALLBACK_HEADER = "X-Anomaly-Fallback"


def read_json() -> object:
    return read_json_body(current_services().settings.max_body_bytes)


def run_detection(job: DetectJob) -> DetectionResult:
    return run_job(current_services().pool, job, failure="Anomaly detection failed")


def detection_job(
    series: CheckedSeries, data_frequency: str, confidence: float, detector: str, start: int = 0
) -> DetectJob:
    import numpy as np
    return DetectJob(
        epoch_seconds=np.asarray(series.epoch_seconds, dtype=np.float64),
        values=np.asarray(series.values, dtype=np.float64),
        data_frequency=data_frequency,
        confidence=confidence,
        detector=detector,
        start=start,
    )


def json_response(body: dict[str, object]) -> Response:
    """The body written by orjson. Every number a detector returns is finite (checked in the worker), so
    orjson's output is the standard library's; the app's provider would send any body holding null (every
    /anomalies answer: direction) to the slower json module."""
    return Response(orjson.dumps(body) + b"\n", mimetype="application/json")


def _headers(response: Response, detector: str, result: DetectionResult) -> Response:
    response.headers["X-Model-Id"] = detector
    if result.fallback:
        response.headers[FALLBACK_HEADER] = result.fallback
    return response


def series_verdicts(
    anomaly_request: AnomalyRequest, series: CheckedSeries, result: DetectionResult
) -> dict[str, object]:
    """POST /anomalies' answer body (also each series' result in an anomaly batch)."""
    return {
        "timestamps": anomaly_request.timestamps,
        "expected": result.expected,
        "lower_bound": result.lower,
        "upper_bound": result.upper,
        "anomaly_score": result.score,
        "is_anomaly": result.is_anomaly,
        "direction": result.direction,
        "warmup_points": result.warmup_points,
        "period": result.period,
        "out_of_order": series.out_of_order,
    }


@bp.post("/anomalies")
@requires("read")
def detect_series() -> Response:
    anomaly_request = load_request(read_json(), request.headers)
    series = check_series(anomaly_request, max_points=current_services().settings.max_points)
    job = detection_job(series, anomaly_request.data_frequency, anomaly_request.confidence, anomaly_request.detector)
    result = run_detection(job)
    body = series_verdicts(anomaly_request, series, result)
    return _headers(json_response(body), anomaly_request.detector, result)


@bp.post("/anomalies/last")
@requires("read")
def detect_last() -> Response:
    anomaly_request = load_request(read_json(), request.headers)
    series = check_series(anomaly_request, max_points=current_services().settings.max_points)
    last = len(series.values) - 1
    job = detection_job(
        series, anomaly_request.data_frequency, anomaly_request.confidence, anomaly_request.detector, last
    )
    result = run_detection(job)
    body = {
        "timestamp": anomaly_request.timestamps[last],
        "expected": result.expected[0],
        "lower_bound": result.lower[0],
        "upper_bound": result.upper[0],
        "anomaly_score": result.score[0],
        "is_anomaly": result.is_anomaly[0],
        "direction": result.direction[0],
        "warmup_points": result.warmup_points,
        "period": result.period,
        "out_of_order": series.out_of_order,
    }
    return _headers(json_response(body), anomaly_request.detector, result)
