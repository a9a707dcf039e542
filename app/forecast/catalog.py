"""What the web process knows about the models: ids, descriptions and seasonal periods.

No numeric imports here: the web process and the admin CLI import this module, while the estimators
themselves load only inside the worker processes (app.forecast.pool).
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

# Seasonal periods per data_frequency, in units of that frequency (docs/contract.md, "Models").
BASE_PERIODS: dict[str, tuple[int, ...]] = {
    "Seconds": (60,),
    "Minutes": (60, 1440),
    "Hours": (24, 168),
    "Daily": (7, 365),
    "Weekly": (52,),
    "Monthly": (12,),
    "Quarterly": (4,),
    "Yearly": (),
}


def seasonal_periods(data_frequency: str, step: int, n_points: int) -> tuple[int, ...]:
    """Seasonal periods in observations for a series spaced ``step`` units apart.

    A period is kept only when it is a whole number of steps and the history holds two full cycles.
    """
    if step < 1:
        raise ValueError("step must be >= 1")
    out = []
    for p in BASE_PERIODS[data_frequency]:
        if p % step:
            continue
        q = p // step
        if q >= 2 and n_points >= 2 * q:
            out.append(q)
    return tuple(out)


def describe_models() -> list[dict[str, str]]:
    return [{"id": mid, "description": DESCRIPTIONS[mid]} for mid in MODEL_IDS]
