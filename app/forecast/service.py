"""The one front door to forecasting: a checked request and series in, the answer out.

POST /forecast, each series of a batch and a monitor's forecast all come through here, so a forecast is the same
whichever door asked for it. The caller says how the computation runs (``run``): the web process hands it to
the worker pool, a batch worker computes it in its own process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.compute.forecast.results import ForecastResult
from app.compute.forecast.work import ForecastWork
from app.forecast.covariates import HolidayInHorizon
from app.forecast.schemas import MIN_POINTS, RECOMMENDED_POINTS, ForecastRequest, SeriesData
from app.series.frequencies import seasonal_periods
from app.series.numbers import interval_without_float32_noise
from app.series.timestamps import future_timestamps

Runner = Callable[[ForecastWork], ForecastResult]


@dataclass(frozen=True)
class CovariatesOutcome:
    """What became of the covariates, holidays and calendar features a request sent (docs/covariates.md)."""

    used: bool  # False: the univariate forecast answered, ``note`` says why
    names: list[str]  # the design columns
    note: str | None
    holidays_in_horizon: list[HolidayInHorizon]

    def as_json(self) -> dict[str, Any]:
        return {"used": self.used, "names": self.names, "note": self.note,
                "holidays_in_horizon": [holiday.as_json() for holiday in self.holidays_in_horizon]}


@dataclass(frozen=True)
class Forecast:
    forecast_timestamps: list[str]
    lower_bound: list[float]
    median: list[float]
    upper_bound: list[float]
    model_id: str
    confidence: float
    fallback: str | None  # why a simpler model answered, if one did
    warning: str | None  # a history shorter than the frequency's recommended length
    covariates: CovariatesOutcome | None = None  # only when the request sent covariates, holidays or calendar


def work_for(forecast_request: ForecastRequest, series: SeriesData) -> ForecastWork:
    return ForecastWork(
        model_id=forecast_request.model_id,
        values=series.values,
        horizon=forecast_request.forecast_horizon,
        confidence=forecast_request.confidence,
        periods=seasonal_periods(forecast_request.data_frequency, series.axis.step, len(series.values)),
        covariates=series.covariates,
    )


def forecast(forecast_request: ForecastRequest, series: SeriesData, *, run: Runner) -> Forecast:
    """The forecast of one checked series. Raises TimestampError when the future timestamps cannot be written
    (each door names that in its own words) before any computation starts."""
    timestamps = future_timestamps(series.axis, forecast_request.forecast_horizon)
    result = run(work_for(forecast_request, series))
    lower, median, upper = interval_without_float32_noise(result.lower, result.median, result.upper)
    return Forecast(
        forecast_timestamps=timestamps,
        lower_bound=lower,
        median=median,
        upper_bound=upper,
        model_id=forecast_request.model_id,
        confidence=forecast_request.confidence,
        fallback=result.fallback,
        warning=short_history_warning(forecast_request, len(series.values)),
        covariates=covariates_outcome(series, result),
    )


def covariates_outcome(series: SeriesData, result: ForecastResult) -> CovariatesOutcome | None:
    if series.covariates is None:
        return None
    return CovariatesOutcome(
        used=bool(result.covariates_used),
        names=list(series.covariates.names),
        note=result.covariates_note,
        holidays_in_horizon=list(series.holidays_in_horizon),
    )


def short_history_warning(forecast_request: ForecastRequest, points: int) -> str | None:
    recommended = RECOMMENDED_POINTS[forecast_request.data_frequency]
    if points >= recommended:
        return None
    return (
        f"History of {points} points is short for {forecast_request.data_frequency} data "
        f"(at least {recommended} recommended); the forecast may be less reliable."
    )


def points_needed(horizon: int, n_windows: int, step: int) -> int:
    """The shortest series a backtest can cut: the first window's history is a forecastable series."""
    return MIN_POINTS + horizon + step * (n_windows - 1)


def cutoffs(length: int, horizon: int, n_windows: int, step: int) -> list[int]:
    """The number of history points of each window of a backtest, oldest first (a backtest batch's windows and
    Nixtla's cross-validation windows alike)."""
    return [length - horizon - step * (n_windows - 1 - w) for w in range(n_windows)]
