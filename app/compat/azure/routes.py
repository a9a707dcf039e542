"""POST /anomalydetector/v1.1/timeseries/{entire,last,changepoint}/detect, in Azure's request and response shape.

Same detector, worker pool, keys, permissions and rate limits as /anomalies; the key may come in
Ocp-Apim-Subscription-Key (what Azure's SDKs send) or as Bearer. Every error on these routes, including
those of the key check and the rate limiter, is rendered in Azure's {"code", "message"} shape.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from flask import Blueprint, Response, g, jsonify
from werkzeug.exceptions import HTTPException

from app.anomalies import service
from app.compat.azure import answers
from app.compat.azure.schemas import (
    SUBSCRIPTION_KEY_HEADER,
    URL_PREFIX,
    AzureError,
    AzureSeries,
    ChangePointLoadSchema,
    DetectLoadSchema,
    check_series,
    load,
)
from app.compute.detect.budget import budget_for_sensitivity
from app.compute.detect.results import DetectionResult
from app.compute.detect.streaming import lookback_rows
from app.services import current_services
from app.web.body import read_body, require_json_content_type
from app.web.errors import ApiError
from app.web.pipeline import key_header, requires
from app.web.pool_work import compute_on_pool
from app.web.validation import parse_json_body

bp = Blueprint("azure", __name__, url_prefix=URL_PREFIX)
log = logging.getLogger("app.compat.azure")

_detect_schema = DetectLoadSchema()
_change_point_schema = ChangePointLoadSchema()

# Azure's codes for the answers the request pipeline gives before a view runs.
_CODES_BY_STATUS = {
    400: "BadArgument",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "BadArgument",
    415: "InvalidJsonFormat",
    422: "InvalidSeries",
    429: "TooManyRequests",
}


def _azure_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    response = jsonify({"code": code, "message": message})
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    response.headers["x-ms-error-code"] = code
    return response


@bp.errorhandler(ApiError)
def _api_error(error: ApiError) -> Response:
    if isinstance(error, AzureError):
        return _azure_response(error.status, error.azure_code, error.message, error.headers)
    if error.status >= 500:
        log.error("request failed: %s", error.message, exc_info=error.__cause__ is not None)
        message = f"{error.message} Quote request id {g.get('request_id')} when reporting it."
        return _azure_response(error.status, "InternalServerError", message, error.headers)
    code = _CODES_BY_STATUS.get(error.status, "BadArgument")
    return _azure_response(error.status, code, error.message, error.headers)


@bp.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    if status >= 500:
        return _azure_response(status, "InternalServerError", "Unexpected server error.")
    return _azure_response(status, _CODES_BY_STATUS.get(status, "BadArgument"), exc.description or "Bad request.")


def _run_on_pool(work: Any) -> Any:
    return compute_on_pool(current_services().pool, work, failure="Anomaly detection failed")


def _detect(series: AzureSeries, sensitivity: int, start: int = 0) -> DetectionResult:
    return service.detect(
        series.epoch_seconds,
        series.values,
        data_frequency=series.data_frequency or "Seconds",
        false_alarms_per_week=budget_for_sensitivity(sensitivity),
        start=start,
        period=series.period,
        run=_run_on_pool,
    )


def _with_fallback(response: Response, result: DetectionResult) -> Response:
    if result.fallback:
        response.headers[service.FALLBACK_HEADER] = result.fallback
    return response


def _read_azure_json() -> object:
    """Azure's series is one object per point, thousands of brackets that make the shared parser take the
    slow path to stay safe on nesting depth; orjson refuses anything nested past 1,024 levels itself, and
    whatever it refuses (NaN, huge integers, bad UTF-8, depth) goes through the shared parser.

    Only what the parser refuses is Azure's InvalidJsonFormat: a body over the limit (413) or one that stopped
    arriving (408, the domain's TimedOut) is answered as on every route, in Azure's shape (docs/anomalies.md,
    docs/operating.md)."""
    raw = read_body(current_services().settings.max_body_bytes)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return parse_json_body(raw)
    except ApiError as exc:
        raise AzureError("InvalidJsonFormat", f"Invalid Json Format: {exc.message}") from exc


def _parse(schema: DetectLoadSchema | ChangePointLoadSchema) -> tuple[dict, AzureSeries]:
    require_json_content_type()
    body = _read_azure_json()
    data = load(schema, body)
    return data, check_series(data, max_points=current_services().settings.max_points)


@bp.post("/timeseries/entire/detect")
@key_header(SUBSCRIPTION_KEY_HEADER)
@requires("read")
def entire_detect() -> Response:
    data, series = _parse(_detect_schema)
    result = _detect(series, data["sensitivity"])
    body = answers.entire(result, series.values.tolist(), max_anomaly_ratio=data["maxAnomalyRatio"])
    return _with_fallback(jsonify(body), result)


@bp.post("/timeseries/last/detect")
@key_header(SUBSCRIPTION_KEY_HEADER)
@requires("read")
def last_detect() -> Response:
    data, series = _parse(_detect_schema)
    last = len(series.values) - 1
    result = _detect(series, data["sensitivity"], start=last)
    body = answers.last(result, float(series.values[last]), suggested_window=min(len(series.values),
                                                                                 lookback_rows(result.period)))
    return _with_fallback(jsonify(body), result)


@bp.post("/timeseries/changepoint/detect")
@key_header(SUBSCRIPTION_KEY_HEADER)
@requires("read")
def change_point_detect() -> Response:
    data, series = _parse(_change_point_schema)
    window = data["stableTrendWindow"]
    if window * 2 >= len(series.values):
        raise AzureError(
            "BadArgument", "The 'stableTrendWindow' field must be an integer >= 3 and < half of the series' length."
        )
    period = series.period if series.period is not None else answers.season_rows(series)
    result = service.change_points(series.values, window=window, threshold=data["threshold"], period=period or None,
                                   run=_run_on_pool)
    return jsonify(answers.change_points(result))
