"""POST /forecast and GET /models: thin views over schemas, the worker pool and the models."""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, jsonify, request

from app.compute.forecast.catalog import describe_models
from app.compute.forecast.jobs import ForecastJob
from app.compute.forecast.results import ForecastResult
from app.errors import DataValidationError, InternalError, sentence
from app.forecast.body import read_forecast_request
from app.forecast.schemas import RECOMMENDED_POINTS, ForecastRequest, SeriesData
from app.metrics import record_forecast
from app.series.frequencies import seasonal_periods
from app.series.timestamps import TimestampError, future_timestamps
from app.services import current_services
from app.web.body import read_body, require_json_content_type
from app.web.jobs import run_job
from app.web.pipeline import requires, uncounted

bp = Blueprint("forecast", __name__)
meta = Blueprint("meta", __name__)
log = logging.getLogger("app.forecast")


@bp.post("/forecast")
@requires("read")
def forecast() -> Response:
    require_json_content_type()
    services = current_services()
    forecast_request, series = read_forecast_request(
        read_body(services.settings.max_body_bytes), request.headers, max_points=services.settings.max_points
    )

    timestamps, job = plan_forecast(forecast_request, series)
    started = time.perf_counter()
    try:
        result: ForecastResult = run_job(services.pool, job)
    except InternalError as exc:
        record_forecast(job.model_id, type(exc.__cause__).__name__, time.perf_counter() - started)
        raise
    record_forecast(job.model_id, "ok", time.perf_counter() - started, fallback=result.fallback is not None)

    response = jsonify(
        {
            "forecast_timestamps": timestamps,
            "lower_bound": result.lower,
            "median": result.median,
            "upper_bound": result.upper,
        }
    )
    response.headers["X-Model-Id"] = forecast_request.model_id
    if result.fallback:
        response.headers["X-Forecast-Fallback"] = result.fallback
    warning = short_history_warning(forecast_request, len(series.values))
    if warning:
        response.headers["X-Forecast-Warning"] = warning
    return response


def plan_forecast(forecast_request: ForecastRequest, series: SeriesData) -> tuple[list[str], ForecastJob]:
    """The forecast's timestamps and the job that computes it, for a checked request and series (POST /forecast
    and each series of a batch); a series whose future timestamps cannot be written is a 422."""
    try:
        timestamps = future_timestamps(series.axis, forecast_request.forecast_horizon)
    except TimestampError as exc:
        raise DataValidationError(
            sentence(f"Invalid series data: {exc.issue}"),
            details={"field": "series[0].timestamps", "issue": exc.issue, "provided": exc.provided, "index": exc.index},
        ) from exc
    job = ForecastJob(
        model_id=forecast_request.model_id,
        values=series.values,
        horizon=forecast_request.forecast_horizon,
        confidence=forecast_request.confidence,
        periods=seasonal_periods(forecast_request.data_frequency, series.axis.step, len(series.values)),
    )
    return timestamps, job


def short_history_warning(forecast_request: ForecastRequest, points: int) -> str | None:
    recommended = RECOMMENDED_POINTS[forecast_request.data_frequency]
    if points >= recommended:
        return None
    return (
        f"History of {points} points is short for {forecast_request.data_frequency} data "
        f"(at least {recommended} recommended); the forecast may be less reliable."
    )


@meta.get("/models")
@uncounted
def models() -> Response:
    return jsonify({"models": describe_models()})
