"""Backtest batches: each series forecast from several past cut-offs by one or more models, and scored.

A window's forecast is the front door's answer (app.forecast.service) for the series' history up to its
cut-off, checked exactly as POST /forecast checks a series: so each window is what POST /forecast answers for
that history, and a backtest says how the service's own forecasts would have fared. Cut-offs are placed as
statsforecast's and TimeGPT's ``cross_validation`` place them: the last window ends with the series, each
earlier one ``step_size`` points before the next.

Scores are the M4 competition's (app.forecast.accuracy): per window, MASE and MSIS scaled by the seasonal naive
error of that window's history; per series and model, the mean over its windows (sMAPE and coverage over its
points); per model, the mean over the series that have a finite score."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from marshmallow import ValidationError, fields, validate, validates_schema

from app import errors as domain
from app.batches import covariates as batch_covariates
from app.batches.one_series import ANSWERED, envelope_of, line_of, run_here, submitted_series
from app.batches.schemas import ForecastBatchRequestSchema
from app.compute.forecast.catalog import MODEL_IDS
from app.forecast import service as forecasting
from app.forecast.schemas import (
    DEFAULT_CONFIDENCE,
    SubmittedSeries,
    asks_for_covariates,
    check_covariates,
    check_series,
    invalid_future_timestamps,
    missing_rows,
)
from app.forecast.schemas import load_request as load_forecast_request
from app.forecast.service import cutoffs, points_needed
from app.series.numbers import without_float32_noise
from app.series.timestamps import TimestampError
from app.web.validation import problem

log = logging.getLogger("app.batches")

N_WINDOWS_RANGE = (1, 50)
STEP_RANGE = (1, 10_000)
FIELDS = ("forecast_horizon", "data_frequency", "forecast_frequency", "confidence", "n_windows", "step_size",
          "models")
SCORES = ("mase", "smape", "coverage", "msis")


class BacktestBatchRequestSchema(ForecastBatchRequestSchema):
    n_windows = fields.Integer(
        required=True, strict=True,
        validate=validate.Range(*N_WINDOWS_RANGE, error="Must be between {min} and {max}"),
        metadata={"description": "Backtest only: how many cut-offs each series is forecast from."},
    )
    step_size = fields.Integer(
        strict=True, validate=validate.Range(*STEP_RANGE, error="Must be between {min} and {max}"),
        metadata={"description": "Backtest only: points between consecutive cut-offs (default: the horizon)."},
    )
    models = fields.List(
        fields.String(validate=validate.OneOf(MODEL_IDS, error="Must be one of: " + ", ".join(MODEL_IDS))),
        validate=validate.Length(min=1, max=len(MODEL_IDS), error="Must list between {min} and {max} models."),
        metadata={"description": "Backtest only: the models to compare (default: the X-Model-Id header's)."},
    )

    @validates_schema
    def _models_unique(self, data: dict[str, Any], **kwargs: Any) -> None:
        models = data.get("models") or []
        if len(set(models)) != len(models):
            raise ValidationError("Must not list a model twice", field_name="models")


def plan(parameters: Mapping[str, Any]) -> tuple[int, int, int]:
    """(horizon, n_windows, step_size) of a checked backtest's fields."""
    horizon = parameters["forecast_horizon"]
    return horizon, parameters["n_windows"], parameters.get("step_size") or horizon


def short_series_problems(series: Iterable[Mapping[str, Any]], parameters: Mapping[str, Any]) -> list[dict]:
    """One problem per series too short for the backtest's windows (by its number of values)."""
    needed = points_needed(*plan(parameters))
    return [
        problem(f"series[{index}].values", f"too short for the backtest's windows (at least {needed} points)",
                f"{len(one['values'])} points", minimum=needed)
        for index, one in enumerate(series)
        if isinstance(one.get("values"), list) and len(one["values"]) < needed
    ]


class BacktestRunner:
    """Backtests the series of one batch, each on its own: a series that fails gets its error, as POST
    /forecast words it, and the others are unaffected."""

    def __init__(self, parameters: dict[str, Any], *, max_points: int) -> None:
        chosen = parameters["fields"]
        self.max_points = max_points
        self.horizon, self.n_windows, self.step = plan(chosen)
        self.frequency = chosen["data_frequency"]
        self.confidence = chosen.get("confidence", DEFAULT_CONFIDENCE)
        self.models = chosen.get("models") or [parameters["headers"]["X-Model-Id"]]
        # The fields every window's request carries (holidays, calendar features), read as POST /forecast reads
        # them; each window's request differs only in its model.
        self.request = load_forecast_request({**chosen, "series": [{"timestamps": [], "values": []}]},
                                             parameters["headers"])[0]
        self.covariate_fields = batch_covariates.CovariateFields.of(chosen)

    def run(self, series: dict[str, Any], *, index: int) -> tuple[bool, bytes]:
        try:
            if "columns" in series:  # a CSV series with covariate columns: they span the series
                series = batch_covariates.csv_series(series, self.covariate_fields, horizon=None,
                                                     frequency=self.frequency)
            return True, line_of({"id": series["id"], **self.backtest(series["timestamps"], series["values"],
                                                                      series.get("covariates") or ())})
        except ANSWERED as error:
            return False, line_of({"id": series["id"], "error": envelope_of(error, index)})
        except Exception as exc:  # a model failure is this series' own 500, never the batch's
            log.warning("backtest series %s failed", index, exc_info=True)
            return False, line_of({"id": series["id"], "error": {
                "code": "INTERNAL_ERROR", "message": f"The forecast failed: {type(exc).__name__}.", "details": {}}})

    def backtest(self, timestamps: list[Any], values: list[Any],
                 covariates: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """The windows and scores of one series, or the error (422) that POST /forecast would give it.
        ``covariates`` span the series (POST /forecast's form without ``future``): each window takes their values
        up to its cut-off as history and, unless past-only, the values over its horizon as future."""
        import numpy as np

        from app.forecast.accuracy import MASE_PERIOD, coverage, mase, mase_scale, msis, smape

        whole = check_series(SubmittedSeries(timestamps=timestamps, values=values), self.frequency,
                             max_points=self.max_points)
        if whole.missing_values:
            # Windows are cut and scored by position: a missing value would leave a window without its actuals.
            index = missing_rows(values)[0]
            issue = "missing value (null): a backtest scores every point, so each needs a value"
            raise domain.InvalidInput(f"Invalid series data: {issue}.", details=problem(
                "series[0].values", issue, None, index=index))
        needed = points_needed(self.horizon, self.n_windows, self.step)
        if len(whole.values) < needed:
            issue = f"too short for the backtest's windows (at least {needed} points)"
            raise domain.InvalidInput(f"Invalid series data: {issue}.", details=problem(
                "series[0].values", issue, f"{len(whole.values)} points", minimum=needed))
        covariates = list(covariates)
        for position, covariate in enumerate(covariates):
            if len(covariate["history"]) != len(timestamps):
                raise domain.InvalidInput(
                    "Invalid covariates: a backtest's covariate has one value per timestamp of the series.",
                    details=problem(f"series[0].covariates[{position}].history", "must have one value per "
                                    "timestamp of the series", f"{len(covariate['history'])} values",
                                    expected=len(timestamps)))
        season = MASE_PERIOD[self.frequency]
        alpha = 1.0 - self.confidence
        windows: list[dict[str, Any]] = []
        per_model: dict[str, dict[str, list[float]]] = {m: {name: [] for name in SCORES} for m in self.models}
        for cut in cutoffs(len(whole.values), self.horizon, self.n_windows, self.step):
            # The history as POST /forecast would receive it: the same checks, the same axis.
            submitted = submitted_series(
                {"timestamps": timestamps[:cut], "values": values[:cut],
                 "covariates": batch_covariates.window(covariates, cut, self.horizon, self.covariate_fields.past_only)},
                self.covariate_fields)
            history = check_series(submitted, self.frequency, max_points=self.max_points)
            if asks_for_covariates(self.request, submitted):
                history = check_covariates(self.request, submitted, history)
            actual = whole.values[cut:cut + self.horizon]
            scale = mase_scale(history.values, season)
            window: dict[str, Any] = {"cutoff": timestamps[cut - 1], "actual": without_float32_noise(actual.tolist()),
                                      "forecasts": {}}
            for model_id in self.models:
                request = dataclasses.replace(self.request, model_id=model_id)
                try:
                    answer = forecasting.forecast(request, history, run=run_here)
                except TimestampError as exc:
                    raise invalid_future_timestamps(exc) from exc
                window["timestamps"] = answer.forecast_timestamps
                window["forecasts"][model_id] = {"lower": answer.lower_bound, "median": answer.median,
                                                 "upper": answer.upper_bound}
                if answer.covariates is not None:
                    window["forecasts"][model_id]["covariates"] = answer.covariates.as_json()
                median, lower, upper = (np.asarray(x) for x in (answer.median, answer.lower_bound,
                                                                 answer.upper_bound))
                scores = per_model[model_id]
                with np.errstate(divide="ignore", invalid="ignore"):
                    scores["mase"].append(mase(actual, median, scale) if scale > 0 else math.nan)
                    scores["msis"].append(msis(actual, lower, upper, scale, alpha) if scale > 0 else math.nan)
                scores["smape"].append(smape(actual, median))
                scores["coverage"].append(coverage(actual, lower, upper))
            windows.append(window)
        summary = {model_id: {name: _finite_mean(scores[name]) for name in SCORES}
                   for model_id, scores in per_model.items()}
        return {"windows": windows, "summary": summary}


def _finite_mean(numbers: list[float]) -> float | None:
    """The mean, or None (JSON null) when a score is undefined: a window whose history never changed has no
    MASE scale."""
    if not numbers or not all(math.isfinite(x) for x in numbers):
        return None
    return sum(numbers) / len(numbers)


def summarize(outputs: Iterable[bytes]) -> dict[str, Any]:
    """The summary of a backtest's stored results: per series and model, and per model the mean over the
    series with a finite score (``series`` counts them, per score)."""
    import orjson

    rows: list[dict[str, Any]] = []
    totals: dict[str, dict[str, list[float]]] = {}
    failed = 0
    for output in outputs:
        for text in output.splitlines():
            result = orjson.loads(text)
            if "error" in result:
                failed += 1
                continue
            for model_id, scores in result["summary"].items():
                rows.append({"unique_id": result["id"], "model": model_id, **scores})
                bucket = totals.setdefault(model_id, {name: [] for name in SCORES})
                for name in SCORES:
                    if scores[name] is not None:
                        bucket[name].append(scores[name])
    models = [
        {"model": model_id, **{name: (sum(v) / len(v) if v else None) for name, v in bucket.items()},
         "series": {name: len(v) for name, v in bucket.items()}}
        for model_id, bucket in totals.items()
    ]
    return {"models": models, "series": rows, "failed_series": failed}
