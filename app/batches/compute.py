"""One series of a batch, checked and computed exactly as POST /forecast or POST /anomalies would: the same
request loading, the same series checks (same messages), the same jobs, run here in the job worker's process.

A series that fails gets its own error in the usual envelope; the others are unaffected."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from app.anomalies.routes import detection_job, series_verdicts
from app.anomalies.schemas import check_series as check_anomaly_series
from app.anomalies.schemas import load_request as load_anomaly_request
from app.errors import ApiError
from app.forecast.routes import plan_forecast, short_history_warning
from app.forecast.schemas import check_series as check_forecast_series
from app.forecast.schemas import load_request as load_forecast_request

log = logging.getLogger("app.batches")

FORECAST, ANOMALIES = "forecast", "anomalies"
KINDS = (FORECAST, ANOMALIES)


def single_series_body(parameters: dict[str, Any], series: dict[str, Any]) -> dict[str, Any]:
    """The POST /forecast (or /anomalies) body that asks for this one series with the batch's fields."""
    return {**parameters["fields"], "series": [{"timestamps": series["timestamps"], "values": series["values"]}]}


def run_series(kind: str, parameters: dict[str, Any], series: dict[str, Any], *, index: int,
               max_points: int) -> tuple[bool, bytes]:
    """(succeeded, the series' result as one JSON line)."""
    headers = parameters["headers"]
    try:
        body = single_series_body(parameters, series)
        if kind == FORECAST:
            result = _forecast(body, headers, max_points)
        else:
            result = _anomalies(body, headers, max_points)
        return True, _line({"id": series["id"], **result})
    except ApiError as error:
        return False, _line({"id": series["id"], "error": envelope_of(error, index)})
    except Exception as exc:  # a model failure is this series' own 500, never the batch's
        log.warning("batch series %s failed", index, exc_info=True)
        failure = "Anomaly detection failed" if kind == ANOMALIES else "The forecast failed"
        return False, _line({"id": series["id"], "error": {
            "code": "INTERNAL_ERROR", "message": f"{failure}: {type(exc).__name__}.", "details": {}}})


def _forecast(body: dict[str, Any], headers: dict[str, str], max_points: int) -> dict[str, Any]:
    forecast_request, submitted = load_forecast_request(body, headers)
    series = check_forecast_series(submitted, forecast_request.data_frequency, max_points=max_points)
    timestamps, job = plan_forecast(forecast_request, series)
    result = job.run()
    answer: dict[str, Any] = {
        "forecast_timestamps": timestamps,
        "lower_bound": result.lower,
        "median": result.median,
        "upper_bound": result.upper,
        "model_id": forecast_request.model_id,
    }
    if result.fallback:
        answer["fallback"] = result.fallback
    warning = short_history_warning(forecast_request, len(series.values))
    if warning:
        answer["warning"] = warning
    return answer


def _anomalies(body: dict[str, Any], headers: dict[str, str], max_points: int) -> dict[str, Any]:
    anomaly_request = load_anomaly_request(body, headers)
    series = check_anomaly_series(anomaly_request, max_points=max_points)
    job = detection_job(series, anomaly_request.data_frequency, anomaly_request.confidence, anomaly_request.detector)
    result = job.run()
    answer = series_verdicts(anomaly_request, series, result)
    answer["model_id"] = anomaly_request.detector
    if result.fallback:
        answer["fallback"] = result.fallback
    return answer


def envelope_of(error: ApiError, index: int) -> dict[str, Any]:
    """The error as POST /forecast would answer it, its field paths naming this series' place in the batch
    (``series[0]`` of the single-series request is ``series[index]`` of the batch)."""
    details = _renamed(error.details or {}, index)
    return {"code": error.code, "message": error.message, "details": details}


def _renamed(details: dict[str, Any], index: int) -> dict[str, Any]:
    out = dict(details)
    field = out.get("field")
    if isinstance(field, str) and field.startswith("series[0]"):
        out["field"] = f"series[{index}]" + field[len("series[0]"):]
    if isinstance(out.get("errors"), list):
        out["errors"] = [_renamed(item, index) if isinstance(item, dict) else item for item in out["errors"]]
    return out


def _line(value: dict[str, Any]) -> bytes:
    # Every number a model or detector returns is finite (checked where they are computed), so orjson's JSON
    # is the standard library's.
    return orjson.dumps(value) + b"\n"
