"""POST /forecast and GET /models: thin views over the body reader and the forecast service."""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, jsonify, request

from app.compute.forecast.catalog import describe_models
from app.compute.forecast.results import ForecastResult
from app.compute.forecast.work import ForecastWork
from app.forecast import service
from app.forecast.body import read_forecast_request
from app.forecast.schemas import invalid_future_timestamps
from app.series.timestamps import TimestampError
from app.services import current_services
from app.web.body import read_body, require_json_content_type
from app.web.errors import InternalError
from app.web.metrics import record_forecast
from app.web.pipeline import requires, uncounted
from app.web.pool_work import compute_on_pool

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

    def run_on_pool(work: ForecastWork) -> ForecastResult:
        started = time.perf_counter()
        try:
            result: ForecastResult = compute_on_pool(services.pool, work)
        except InternalError as exc:
            record_forecast(work.model_id, type(exc.__cause__).__name__, time.perf_counter() - started)
            raise
        record_forecast(work.model_id, "ok", time.perf_counter() - started, fallback=result.fallback is not None)
        return result

    try:
        answer = service.forecast(forecast_request, series, run=run_on_pool)
    except TimestampError as exc:
        raise invalid_future_timestamps(exc) from exc
    response = jsonify(
        {
            "forecast_timestamps": answer.forecast_timestamps,
            "lower_bound": answer.lower_bound,
            "median": answer.median,
            "upper_bound": answer.upper_bound,
            **({"missing_values": series.missing_values} if series.missing_values else {}),
            **({"covariates": answer.covariates.as_json()} if answer.covariates is not None else {}),
        }
    )
    response.headers["X-Model-Id"] = answer.model_id
    if answer.fallback:
        response.headers["X-Forecast-Fallback"] = answer.fallback
    if answer.warning:
        response.headers["X-Forecast-Warning"] = answer.warning
    return response


@meta.get("/models")
@uncounted
def models() -> Response:
    return jsonify({"models": describe_models()})
