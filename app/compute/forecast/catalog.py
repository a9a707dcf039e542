"""The forecast models' ids and descriptions.

No numeric imports here: the web process and the admin CLI import this module, while the estimators
themselves load only inside the worker processes (app.compute.pool).
"""

from __future__ import annotations

MODEL_IDS: tuple[str, ...] = ("forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4")
DEFAULT_MODEL_ID = "forecast-model-1"

DESCRIPTIONS: dict[str, str] = {
    "forecast-model-1": "General-purpose default: per-series validated combination of exponential smoothing, "
    "Theta, autoregressive and seasonal models.",
    "forecast-model-2": "Lightweight, low-latency trend-aware model: Theta method (seasonal-position on strongly "
    "seasonal data).",
    "forecast-model-3": "Complex seasonal / long horizon: MSTL multiple-seasonal decomposition with a "
    "seasonal-position Theta or a validated exponential-smoothing model on the adjusted series.",
    "forecast-model-4": "High-variance ops metrics: spike-robust forecast, empirical rolling-origin intervals, "
    "never negative for non-negative data.",
}

# Whether a model takes covariates: all four do, through the one regression around them
# (app.compute.forecast.regression, docs/covariates.md).
TAKES_COVARIATES: dict[str, bool] = dict.fromkeys(MODEL_IDS, True)


def describe_models() -> list[dict[str, str | bool]]:
    return [{"id": mid, "description": DESCRIPTIONS[mid], "covariates": TAKES_COVARIATES[mid]} for mid in MODEL_IDS]
