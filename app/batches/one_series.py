"""One series of a batch, checked and computed through the same front doors as POST /forecast and POST /anomalies:
the same checks (the same messages), the same models and detectors, run here in the job worker's process.

The batch's fields were checked when it was submitted; they are read into the front door's typed request once
per chunk. A series that fails gets its own error in the usual envelope; the others are unaffected."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson

from app import errors as domain
from app.anomalies import service as detection
from app.anomalies.schemas import AnomalyRequest
from app.anomalies.schemas import check_series as check_anomaly_series
from app.anomalies.schemas import load_request as load_anomaly_request
from app.batches.covariates import CovariateFields, categorical_as_text, csv_series
from app.forecast import service as forecasting
from app.forecast.schemas import (
    ForecastRequest,
    SubmittedSeries,
    asks_for_covariates,
    check_covariates,
    invalid_future_timestamps,
)
from app.forecast.schemas import check_series as check_forecast_series
from app.forecast.schemas import load_request as load_forecast_request
from app.series.timestamps import TimestampError
from app.web.errors import ApiError, api_error_for

log = logging.getLogger("app.batches")

# What a series' failure is answered with, as its single-series request would be: the front doors' checks are their
# schemas' (the HTTP edge's errors), the work after them the domain's.
ANSWERED = (ApiError, domain.ServiceError)

FORECAST, ANOMALIES, BACKTEST = "forecast", "anomalies", "backtest"
KINDS = (FORECAST, ANOMALIES, BACKTEST)

# The fields' own checks need a series to look at; this one passes them and is never computed.
_PROBE_SERIES = {"timestamps": [], "values": []}


def run_here(job: Any) -> Any:
    return job.run()


class SeriesRunner:
    """Computes the series of one batch, each as its own request with the batch's fields."""

    def __init__(self, kind: str, parameters: dict[str, Any], *, max_points: int) -> None:
        self.kind = kind
        self.max_points = max_points
        body = {**parameters["fields"], "series": [_PROBE_SERIES]}
        self.covariate_fields = CovariateFields.of(parameters["fields"])
        self.request: ForecastRequest | AnomalyRequest
        if kind == FORECAST:
            self.request = load_forecast_request(body, parameters["headers"])[0]
        else:
            self.request = load_anomaly_request(body, parameters["headers"])

    def run(self, series: dict[str, Any], *, index: int) -> tuple[bool, bytes]:
        """(succeeded, the series' result as one JSON line)."""
        try:
            if isinstance(self.request, ForecastRequest):
                result = self._forecast(self.request, series)
            else:
                result = self._anomalies(self.request, series)
            return True, line_of({"id": series["id"], **result})
        except ANSWERED as error:
            return False, line_of({"id": series["id"], "error": envelope_of(error, index)})
        except Exception as exc:  # a model failure is this series' own 500, never the batch's
            log.warning("batch series %s failed", index, exc_info=True)
            failure = "Anomaly detection failed" if self.kind == ANOMALIES else "The forecast failed"
            return False, line_of({"id": series["id"], "error": {
                "code": "INTERNAL_ERROR", "message": f"{failure}: {type(exc).__name__}.", "details": {}}})

    def _forecast(self, forecast_request: ForecastRequest, submitted: dict[str, Any]) -> dict[str, Any]:
        if "columns" in submitted:  # a CSV series with covariate columns (and maybe future rows)
            submitted = csv_series(submitted, self.covariate_fields, horizon=forecast_request.forecast_horizon,
                                   frequency=forecast_request.data_frequency)
        one = submitted_series(submitted, self.covariate_fields)
        series = check_forecast_series(one, forecast_request.data_frequency, max_points=self.max_points)
        if asks_for_covariates(forecast_request, one):
            series = check_covariates(forecast_request, one, series)
        try:
            answer = forecasting.forecast(forecast_request, series, run=run_here)
        except TimestampError as exc:
            raise invalid_future_timestamps(exc) from exc
        out: dict[str, Any] = {
            "forecast_timestamps": answer.forecast_timestamps,
            "lower_bound": answer.lower_bound,
            "median": answer.median,
            "upper_bound": answer.upper_bound,
            "model_id": answer.model_id,
        }
        if series.missing_values:
            out["missing_values"] = series.missing_values
        if answer.fallback:
            out["fallback"] = answer.fallback
        if answer.warning:
            out["warning"] = answer.warning
        if answer.covariates is not None:
            out["covariates"] = answer.covariates.as_json()
        return out

    def _anomalies(self, anomaly_request: AnomalyRequest, submitted: dict[str, Any]) -> dict[str, Any]:
        one = dataclasses.replace(anomaly_request, timestamps=submitted["timestamps"], values=submitted["values"])
        series = check_anomaly_series(one, max_points=self.max_points)
        result = detection.detect(series.epoch_seconds, series.values, data_frequency=one.data_frequency,
                                  confidence=one.confidence, false_alarms_per_week=one.false_alarms_per_week,
                                  detector=one.detector, run=run_here)
        answer = detection.verdicts(series.timestamps, series, result)
        answer["model_id"] = one.detector
        if result.fallback:
            answer["fallback"] = result.fallback
        return answer


def submitted_series(submitted: dict[str, Any], spec: CovariateFields) -> SubmittedSeries:
    """A stored series (JSON form) as POST /forecast's request holds it, with its covariates."""
    from app.forecast.covariates import CovariateInput

    covariates = categorical_as_text(submitted.get("covariates") or (), spec)
    return SubmittedSeries(
        timestamps=submitted["timestamps"], values=submitted["values"],
        covariates=tuple(CovariateInput(name=c["name"], history=c["history"], future=c.get("future"))
                         for c in covariates),
    )


def envelope_of(error: ApiError | domain.ServiceError, index: int) -> dict[str, Any]:
    """The error as POST /forecast would answer it, its field paths naming this series' place in the batch
    (``series[0]`` of the single-series request is ``series[index]`` of the batch)."""
    answer = api_error_for(error) if isinstance(error, domain.ServiceError) else error
    details = _renamed(answer.details or {}, index)
    return {"code": answer.code, "message": answer.message, "details": details}


def _renamed(details: dict[str, Any], index: int) -> dict[str, Any]:
    out = dict(details)
    field = out.get("field")
    if isinstance(field, str) and field.startswith("series[0]"):
        out["field"] = f"series[{index}]" + field[len("series[0]"):]
    if isinstance(out.get("errors"), list):
        out["errors"] = [_renamed(item, index) if isinstance(item, dict) else item for item in out["errors"]]
    return out


def line_of(value: dict[str, Any]) -> bytes:
    # Every number a model or detector returns is finite (checked where they are computed), so orjson's JSON
    # is the standard library's.
    return orjson.dumps(value) + b"\n"
