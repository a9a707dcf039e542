"""Forecast models behind the X-Model-Id header (DECISIONS D4).

Contract: every model is a class configured only in its constructor; ``fit(values, horizon, periods)``
returns a ``Fitted`` forecast whose ``predict(confidence)`` gives (median, lower, upper). Fitting does
all the work (point forecast and rolling-origin error measurement), so several confidences of one
request cost one fit. ``run_forecast`` adds the fallback (D4.4) and the output guarantees (D4.5).

Every model works on a scale-normalised copy of (at most) the last ``max_history`` points, so the cost
is bounded whatever the request size (up to 100,000 points); the caps are listed per model below.
Estimators and their figures are documented in the model classes and chosen on M4 training data
(bench/accuracy.py --split valid).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.forecast.candidates import CANDIDATES, Candidate
from app.forecast.intervals import ErrorModel, fit_errors, origins
from app.forecast.robust import clean_spikes
from app.forecast.seasonal import acf_seasonal, position_theta

MODEL_IDS: tuple[str, ...] = ("forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4")
DEFAULT_MODEL_ID = "forecast-model-1"

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


@dataclass(frozen=True)
class ForecastResult:
    median: list[float]
    lower: list[float]
    upper: list[float]
    fallback: str | None = None


class ForecastError(Exception):
    """The model and its fallback both failed."""


def seasonal_periods(data_frequency: str, step: int, n_points: int) -> tuple[int, ...]:
    """Seasonal periods in observations (D4.3) for a series spaced ``step`` units apart."""
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


def usable_periods(periods: Sequence[int], n: int) -> tuple[int, ...]:
    """Periods with at least two full cycles in a history of n points, ascending."""
    return tuple(sorted(int(p) for p in periods if p >= 2 and n >= 2 * p))


# --------------------------------------------------------------------------------------------------
# fitted forecast


@dataclass(frozen=True)
class Fitted:
    """A fitted forecast in normalised units; predict() maps back to the data scale."""

    median: np.ndarray
    errors: ErrorModel
    scale: float
    nonnegative: bool = False
    asymmetric: bool = False

    def predict(self, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = len(self.median)
        if self.asymmetric:
            down, up = self.errors.asymmetric(h, confidence)
        else:
            down, up = self.errors.half_widths(h, confidence)
        med = self.median * self.scale
        lo = (self.median - down) * self.scale
        hi = (self.median + up) * self.scale
        if self.nonnegative:
            med, lo, hi = np.maximum(med, 0.0), np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        return med, lo, hi


def _normalise(values: Sequence[float], cap: int) -> tuple[np.ndarray, float]:
    y = np.asarray(values, dtype=float)[-cap:]
    scale = float(np.mean(np.abs(y)))
    if not np.isfinite(scale) or scale <= 0:
        scale = 1.0
    return y / scale, scale


def _step_scale(y: np.ndarray) -> float:
    d = np.diff(y)
    return float(np.sqrt(np.mean(d * d))) if len(d) else 0.0


class ForecastModel:
    """Base class: point forecast + rolling-origin conformal intervals.

    Subclasses implement ``point(y, h, periods)`` on a normalised array. Constructor arguments:
    ``max_history`` (points read, newest last), ``n_origins`` (rolling origins for the errors),
    ``interval_scale`` (multiplier on measured errors, chosen on M4 training data).
    """

    id = ""
    description = ""

    def __init__(self, max_history: int = 3000, n_origins: int = 6, interval_scale: float = 1.0,
                 min_train: int = 8) -> None:
        self.max_history = max_history
        self.n_origins = n_origins
        self.interval_scale = interval_scale
        self.min_train = min_train

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def _min_train(self, n: int, periods: tuple[int, ...]) -> int:
        need = 2 * max(periods) if periods else self.min_train
        return max(self.min_train, min(need, n // 2))

    def _origin_step(self, hv: int) -> int:
        return hv

    def fit(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> Fitted:
        y, scale = _normalise(values, self.max_history)
        n = len(y)
        per = usable_periods(periods, n)
        med = np.asarray(self.point(y, horizon, per), dtype=float)
        orgs, hv = origins(n, horizon, self._min_train(n, per), self.n_origins)
        errs = np.full((len(orgs), hv), np.nan)
        for j, o in enumerate(orgs):
            f = self.point(y[:o], hv, usable_periods(per, o))
            errs[j] = y[o:o + hv] - f
        em = fit_errors(errs, _step_scale(y), self.interval_scale)
        return Fitted(med, em, scale)


# --------------------------------------------------------------------------------------------------
# forecast-model-2


class PositionTheta(ForecastModel):
    """forecast-model-2: seasonal-position Theta, pure numpy/scipy.

    The history is cut into cycles of the shortest seasonal period that passes the 90% ACF test; each
    position (hour of day, ...) is smoothed across cycles by SES with one shared alpha, and the Theta
    drift of the cycle means is added. No seasonality: the classic Theta method. History cap: 2000 points.
    """

    id = "forecast-model-2"
    description = "Lightweight, low-latency trend-aware model: seasonal-position Theta (SES + drift)."

    def __init__(self, max_history: int = 2000, n_origins: int = 12, interval_scale: float = 1.0) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, interval_scale=interval_scale)

    def _period(self, y: np.ndarray, periods: tuple[int, ...]) -> int:
        for m in periods:
            if acf_seasonal(y, m):
                return m
        return 1

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        return position_theta(y, h, self._period(y, periods))

    def fit(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> Fitted:
        # decide the period once on the full (capped) history, keep it at every origin
        y, _ = _normalise(values, self.max_history)
        m = self._period(y, usable_periods(periods, len(y)))
        fixed = _FixedPeriod(m, self.max_history, self.n_origins, self.interval_scale)
        return ForecastModel.fit(fixed, values, horizon, periods)


class _FixedPeriod(ForecastModel):
    def __init__(self, m: int, max_history: int, n_origins: int, interval_scale: float) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, interval_scale=interval_scale)
        self.m = m

    def _min_train(self, n: int, periods: tuple[int, ...]) -> int:
        need = 2 * self.m if self.m > 1 else self.min_train
        return max(self.min_train, min(need, n // 2))

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        m = self.m if len(y) >= 2 * self.m else 1
        return position_theta(y, h, m)


# --------------------------------------------------------------------------------------------------
# forecast-model-1


class SelectionEnsemble(ForecastModel):
    """forecast-model-1: per-series selection and combination of statistical forecasters.

    Every candidate of ``candidates`` is run at rolling origins inside the history; the mean of the
    ``top`` candidates with the lowest mean absolute error over the last ``windows`` origins is the
    forecast. Interval errors are honest: the combination at each origin is chosen only from the
    origins before it. History cap: 3000 points.
    """

    id = "forecast-model-1"
    description = ("General-purpose default: per-series validated combination of exponential smoothing, "
                   "Theta, ARIMA and seasonal-profile forecasts.")

    def __init__(self, candidates: Sequence[str] = tuple(CANDIDATES), top: int = 2, windows: int = 2,
                 max_history: int = 3000, n_origins: int = 8, interval_scale: float = 1.0,
                 min_samples: int = 60) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, interval_scale=interval_scale)
        self.candidates: list[Candidate] = [CANDIDATES[c] for c in candidates]
        self.top = top
        self.windows = windows
        self.min_samples = min_samples

    def fit(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> Fitted:
        y, scale = _normalise(values, self.max_history)
        n = len(y)
        per = usable_periods(periods, n)
        mt = self._min_train(n, per)
        hv = max(1, min(horizon, n - mt))
        count = max(self.n_origins, self.windows + math.ceil(self.min_samples / hv))
        orgs, hv = origins(n, horizon, mt, count)
        r = len(orgs)
        cands = self.candidates
        fc = np.empty((len(cands), r, hv))
        for j, o in enumerate(orgs):
            yo = y[:o]
            po = usable_periods(per, o)
            for c, cand in enumerate(cands):
                fc[c, j] = cand(yo, hv, po)
        act = np.stack([y[o:o + hv] for o in orgs]) if r else np.empty((0, hv))
        mae = np.abs(fc - act[None]).mean(axis=2) if r else np.empty((len(cands), 0))

        def choose(first: int) -> np.ndarray:
            cols = mae[:, first:first + self.windows]
            if cols.shape[1] == 0:
                return np.arange(min(self.top, len(cands)))
            score = cols.mean(axis=1)
            return np.argsort(score, kind="stable")[: self.top]

        chosen = choose(0)
        med = np.mean([cands[c](y, horizon, per) for c in chosen], axis=0)
        rows = []
        for j in range(r):
            if j + 1 + self.windows <= r or (r <= self.windows + 1 and j + 1 < r):
                sel = choose(j + 1)
                rows.append(act[j] - fc[sel, j].mean(axis=0))
        if not rows and r:
            rows = [act[j] - fc[chosen, j].mean(axis=0) for j in range(r)]
        errs = np.stack(rows) if rows else np.empty((0, hv))
        em = fit_errors(errs, _step_scale(y), self.interval_scale)
        return Fitted(med, em, scale)


# --------------------------------------------------------------------------------------------------
# forecast-model-3


class MSTLForecaster(ForecastModel):
    """forecast-model-3: statsmodels MSTL with all usable periods + a trend/remainder model.

    The seasonal components are continued from their last cycle; the seasonally adjusted series is
    forecast by ``base`` (a candidate name, default damped-trend ES). History cap: 6 cycles of the
    longest period, between 300 and 2000 points.
    """

    id = "forecast-model-3"
    description = ("Complex seasonal / long horizon: MSTL multiple-seasonal decomposition with a damped-trend "
                   "model on the adjusted series.")

    def __init__(self, base: str = "damped", cycles: int = 6, max_history: int = 2000,
                 n_origins: int = 2, interval_scale: float = 1.0) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, interval_scale=interval_scale)
        self.base = CANDIDATES[base]
        self.cycles = cycles

    def _origin_step(self, hv: int) -> int:
        return hv

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        from app.forecast.decompose import mstl_forecast

        cap = min(self.max_history, max(300, self.cycles * max(periods))) if periods else 300
        return mstl_forecast(y[-cap:], h, periods, self.base)


# --------------------------------------------------------------------------------------------------
# forecast-model-4


class RobustConformal(ForecastModel):
    """forecast-model-4: spike-robust forecaster with empirical (conformal) intervals.

    Spikes are replaced (Hampel rule on the residuals of a robust seasonal baseline) before a
    seasonal-position Theta / profile median forecast; the intervals are asymmetric empirical quantiles
    of rolling-origin errors against the *raw* history (spikes widen the upper side), and everything
    is clipped at zero when the history never goes below zero. History cap: 3000 points.
    """

    id = "forecast-model-4"
    description = ("High-variance ops metrics: spike-robust forecast, empirical (conformal) intervals, "
                   "never negative for non-negative data.")

    def __init__(self, max_history: int = 3000, n_origins: int = 10, interval_scale: float = 1.0,
                 threshold: float = 5.0) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, interval_scale=interval_scale)
        self.threshold = threshold

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        yc = clean_spikes(y, periods, self.threshold)
        m = periods[0] if periods else 1
        fs = [position_theta(yc, h, m, drift=0.5), position_theta(yc, h, m, drift=0.0)]
        if len(periods) > 1:
            fs.append(CANDIDATES["wprof_l"](yc, h, periods))
        return np.median(np.stack(fs), axis=0)

    def fit(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> Fitted:
        base = ForecastModel.fit(self, values, horizon, periods)
        nonneg = bool(np.min(np.asarray(values, dtype=float)) >= 0)
        return Fitted(base.median, base.errors, base.scale, nonnegative=nonneg, asymmetric=True)


# --------------------------------------------------------------------------------------------------
# fallback, registry and entry point


class FallbackModel(ForecastModel):
    """Simplest model: seasonal naive (shortest period) or naive, random-walk-like empirical intervals."""

    id = "fallback"
    description = "Seasonal naive fallback."

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        return CANDIDATES["snaive_s"](y, h, periods)


REGISTRY: dict[str, ForecastModel] = {
    "forecast-model-1": SelectionEnsemble(),
    "forecast-model-2": PositionTheta(),
    "forecast-model-3": MSTLForecaster(),
    "forecast-model-4": RobustConformal(),
}
FALLBACKS: dict[str, tuple[str, ForecastModel]] = {
    "forecast-model-1": ("forecast-model-2", REGISTRY["forecast-model-2"]),
    "forecast-model-2": ("seasonal-naive", FallbackModel(max_history=2000, n_origins=12)),
    "forecast-model-3": ("forecast-model-2", REGISTRY["forecast-model-2"]),
    "forecast-model-4": ("seasonal-naive", FallbackModel(max_history=3000, n_origins=12)),
}


def describe_models() -> list[dict[str, str]]:
    return [{"id": mid, "description": REGISTRY[mid].description} for mid in MODEL_IDS]


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


def run_forecast_multi(model_id: str, values: Sequence[float], horizon: int, confidences: Sequence[float],
                       periods: tuple[int, ...]) -> list[ForecastResult]:
    """Like run_forecast for several confidences at the cost of one fit (same results)."""
    if model_id not in REGISTRY:
        raise KeyError(model_id)
    if horizon < 1:
        raise ValueError("horizon must be >= 1")
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) == 0 or not np.all(np.isfinite(arr)):
        raise ValueError("values must be a non-empty sequence of finite numbers")
    try:
        outs = _predict_all(REGISTRY[model_id], arr, horizon, confidences, periods)
        return [_finalise(o, None) for o in outs]
    except Exception as exc:  # noqa: BLE001 - any model failure triggers the fallback (D4.4)
        reason = type(exc).__name__
    fb_name, fb_model = FALLBACKS[model_id]
    try:
        outs = _predict_all(fb_model, arr, horizon, confidences, periods)
    except Exception as exc:  # noqa: BLE001
        raise ForecastError(f"{model_id} failed ({reason}) and fallback {fb_name} failed "
                            f"({type(exc).__name__})") from exc
    note = f"{fb_name}; {model_id} failed: {reason}"[:190]
    return [_finalise(o, note) for o in outs]


def run_forecast(model_id: str, values: Sequence[float], horizon: int, confidence: float,
                 periods: tuple[int, ...]) -> ForecastResult:
    """Forecast ``horizon`` steps with the model ``model_id`` (D4.4 fallback, D4.5 guarantees)."""
    return run_forecast_multi(model_id, values, horizon, [confidence], periods)[0]


