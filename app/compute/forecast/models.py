"""Forecast models behind the X-Model-Id header.

Contract: every model is a class configured only in its constructor; ``fit(values, horizon, periods)``
returns a ``Fitted`` forecast whose ``predict(confidence)`` gives (median, lower, upper). Fitting does
all the work (point forecast and rolling-origin error measurement), so several confidences of one
request cost one fit. ``run_forecast`` adds the fallback and the output guarantees.

Every model works on a scale-normalised copy of (at most) the last ``max_history`` points, so the cost
is bounded whatever the request size (up to 100,000 points). The contract every model follows (prepare ->
candidate pool -> combine -> rolling-origin errors -> interval) is app.compute.forecast.template; one module
a model, with its history cap: model_1_combination (ValidatedCombination),
model_2_theta (ThetaCombination), model_3_mstl (MSTLForecaster), model_4_spike_robust (SpikeRobustCombination),
fallback (SeasonalNaive); what models 1, 2 and 4 do by season length is the table of
app.compute.forecast.seasons. Chosen on M4 training data (bench/accuracy.py --split valid); the figures
behind each rule: bench/results/forecast-rules.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.compute.forecast.base import usable_periods
from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS, describe_models
from app.compute.forecast.fallback import SeasonalNaive
from app.compute.forecast.model_1_combination import ValidatedCombination
from app.compute.forecast.model_2_theta import ThetaCombination
from app.compute.forecast.model_3_mstl import MSTLForecaster
from app.compute.forecast.model_4_spike_robust import SpikeRobustCombination
from app.compute.forecast.regression import forecast_with_covariates
from app.compute.forecast.results import CovariateMatrix, ForecastResult
from app.compute.forecast.template import ForecastModel
from app.compute.pool import WorkFailed
from app.series.frequencies import seasonal_periods

__all__ = [
    "DEFAULT_MODEL_ID",
    "FALLBACKS",
    "MODEL_IDS",
    "REGISTRY",
    "ForecastError",
    "ForecastModel",
    "ForecastResult",
    "describe_models",
    "run_forecast",
    "run_forecast_multi",
    "seasonal_periods",
    "usable_periods",
]


class ForecastError(WorkFailed):
    """The model and its fallback both failed."""


REGISTRY: dict[str, ForecastModel] = {
    "forecast-model-1": ValidatedCombination(),
    "forecast-model-2": ThetaCombination(),
    "forecast-model-3": MSTLForecaster(),
    "forecast-model-4": SpikeRobustCombination(),
}
FALLBACKS: dict[str, tuple[str, ForecastModel]] = {
    "forecast-model-1": ("forecast-model-2", REGISTRY["forecast-model-2"]),
    "forecast-model-2": ("seasonal-naive", SeasonalNaive(max_history=2000, n_origins=12)),
    "forecast-model-3": ("forecast-model-2", REGISTRY["forecast-model-2"]),
    "forecast-model-4": ("seasonal-naive", SeasonalNaive(max_history=3000, n_origins=12)),
}


def _check(out: tuple[np.ndarray, np.ndarray, np.ndarray], h: int) -> None:
    med, lo, hi = out
    for a in out:
        if len(a) != h or not np.all(np.isfinite(a)):
            raise ValueError("non-finite or wrong-length forecast")
    if np.any(lo > med) or np.any(med > hi):
        raise ValueError("unordered interval")


def _predict_all(model: ForecastModel, values: np.ndarray, horizon: int, confidences: Sequence[float],
                 periods: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    fitted = model.fit(values, horizon, periods)
    outs = []
    with np.errstate(all="ignore"):
        for c in confidences:
            out = fitted.predict(float(c))
            _check(out, horizon)
            outs.append(out)
    return outs


def _finalise(out: tuple[np.ndarray, np.ndarray, np.ndarray], fallback: str | None) -> ForecastResult:
    med, lo, hi = (np.asarray(a, dtype=float) for a in out)
    # safety net only: models already satisfy these (checked above)
    lo = np.minimum(lo, med)
    hi = np.maximum(hi, med)
    return ForecastResult([float(v) for v in med], [float(v) for v in lo], [float(v) for v in hi], fallback)


def _univariate(model_id: str, arr: np.ndarray, horizon: int, confidences: Sequence[float],
                periods: tuple[int, ...]) -> list[ForecastResult]:
    """The model's forecast of the series alone, its fallback's if it fails."""
    try:
        outs = _predict_all(REGISTRY[model_id], arr, horizon, confidences, periods)
        return [_finalise(o, None) for o in outs]
    except Exception as exc:  # noqa: BLE001 - any model failure triggers the fallback
        reason = type(exc).__name__
    fb_name, fb_model = FALLBACKS[model_id]
    try:
        outs = _predict_all(fb_model, arr, horizon, confidences, periods)
    except Exception as exc:  # noqa: BLE001
        raise ForecastError(
            f"The model could not produce a forecast: {model_id} failed ({reason}) and fallback {fb_name} failed "
            f"({type(exc).__name__})"
        ) from exc
    note = f"{fb_name}; {model_id} failed: {reason}"[:190]
    return [_finalise(o, note) for o in outs]


def run_forecast_multi(model_id: str, values: Sequence[float], horizon: int, confidences: Sequence[float],
                       periods: tuple[int, ...], *, covariates: CovariateMatrix | None = None) -> list[ForecastResult]:
    """Like run_forecast for several confidences at the cost of one fit (same results)."""
    if model_id not in REGISTRY:
        raise KeyError(model_id)
    if horizon < 1:
        raise ValueError("horizon must be >= 1")
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) == 0 or not np.all(np.isfinite(arr)):
        raise ValueError("values must be a non-empty sequence of finite numbers")
    if covariates is None:
        return _univariate(model_id, arr, horizon, confidences, periods)
    return forecast_with_covariates(model_id, arr, horizon, confidences, periods, covariates, _univariate)


def run_forecast(model_id: str, values: Sequence[float], horizon: int, confidence: float,
                 periods: tuple[int, ...], *, covariates: CovariateMatrix | None = None) -> ForecastResult:
    """Forecast ``horizon`` steps with the model ``model_id`` (with fallback and output guarantees); with
    ``covariates``, the regression of app.compute.forecast.regression around it."""
    return run_forecast_multi(model_id, values, horizon, [confidence], periods, covariates=covariates)[0]
