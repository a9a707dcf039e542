"""Forecast accuracy as the M4 competition scores it (sMAPE, MASE, interval coverage, MSIS): the backtest
batches report these, and the benchmarks (bench/m4.py, bench/accuracy.py) use the same functions, so a
figure in bench/results means what a backtest's summary means."""

from __future__ import annotations

import numpy as np

# M4's seasonal period for the MASE scale, by data frequency (one for the frequencies M4 gave none).
MASE_PERIOD = {
    "Seconds": 1,
    "Minutes": 1,
    "Hours": 24,
    "Daily": 1,
    "Weekly": 1,
    "Monthly": 12,
    "Quarterly": 4,
    "Yearly": 1,
}


def mase_scale(history: np.ndarray, m: int) -> float:
    """The in-sample mean absolute error of the seasonal naive forecast (naive when the history is no longer
    than one season)."""
    x = np.asarray(history, dtype=float)
    if len(x) <= m:
        m = 1
    d = np.abs(x[m:] - x[:-m])
    return float(d.mean()) if len(d) else float("nan")


def smape(actual: np.ndarray, forecast: np.ndarray) -> float:
    y = np.asarray(actual, dtype=float)
    f = np.asarray(forecast, dtype=float)
    den = np.abs(y) + np.abs(f)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, 200.0 * np.abs(y - f) / den, 0.0)
    return float(r.mean())


def mase(actual: np.ndarray, forecast: np.ndarray, scale: float) -> float:
    return float(np.mean(np.abs(np.asarray(actual) - np.asarray(forecast)))) / scale


def coverage(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> float:
    y = np.asarray(actual)
    return float(np.mean((y >= np.asarray(lower)) & (y <= np.asarray(upper))))


def msis(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray, scale: float, alpha: float = 0.05) -> float:
    y = np.asarray(actual, dtype=float)
    lo = np.asarray(lower, dtype=float)
    up = np.asarray(upper, dtype=float)
    pen = (up - lo) + (2.0 / alpha) * (lo - y) * (y < lo) + (2.0 / alpha) * (y - up) * (y > up)
    return float(pen.mean()) / scale
