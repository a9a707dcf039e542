"""Seasonal point forecasters on scale-normalised arrays (numpy/scipy only).

Each function takes the history ``y`` (1-D float array), the horizon ``h`` and a period ``m`` and
returns ``h`` point forecasts. All handle short histories by degrading to simpler forecasts.
"""

from __future__ import annotations

import numpy as np

from app.compute.forecast.optimisers import bounded_minimum
from app.compute.forecast.smoothing import linear_filter, ses_forecast, theta_forecast


def naive(y: np.ndarray, h: int) -> np.ndarray:
    return np.full(h, float(y[-1]))


def seasonal_naive(y: np.ndarray, h: int, m: int) -> np.ndarray:
    n = len(y)
    if m < 2 or n < m:
        return naive(y, h)
    last = y[n - m:]
    return last[np.arange(h) % m].astype(float)


def acf_seasonal(y: np.ndarray, m: int) -> bool:
    """90% autocorrelation test at lag m (the M4 Naive2/Theta benchmark test) on the linearly detrended
    series: on a raw trending series the trend's autocorrelation at every lag hides the season
    (monthly data with a trend of 5 a month and a seasonal amplitude of 40 tests non-seasonal raw)."""
    n = len(y)
    if m < 2 or n < 3 * m:
        return False
    t = np.arange(n, dtype=float)
    x = y - np.polyval(np.polyfit(t, y, 1), t)
    x = x - x.mean()
    den = float(x @ x)
    if den <= 0:
        return False
    r = np.array([float(x[: n - k] @ x[k:]) / den for k in range(1, m + 1)])
    limit = 1.645 * np.sqrt((1 + 2 * np.sum(r[: m - 1] ** 2)) / n)
    return bool(abs(r[m - 1]) > limit) or _anova_seasonal(y, m)


def _anova_seasonal(y: np.ndarray, m: int, p_value: float = 0.01) -> bool:
    """One-way ANOVA of the series minus its centred moving average (length m) by position in the
    cycle: do the positions differ by more than noise would (F test at ``p_value``)? Catches smooth
    seasons on 3-4 cycles, where the ACF test's Bartlett limit (inflated by the season's own
    autocorrelation at the lags below m) is too wide."""
    from scipy.stats import f as f_dist

    w = np.r_[0.5, np.ones(m - 1), 0.5] / m if m % 2 == 0 else np.ones(m) / m
    ma = np.convolve(y, w, mode="valid")
    off = (len(w) - 1) // 2
    det = y[off: off + len(ma)] - ma
    pos = np.arange(off, off + len(ma)) % m
    cnt = np.bincount(pos, minlength=m)
    if len(det) < 2 * m or np.any(cnt < 2):
        return False
    means = np.bincount(pos, weights=det, minlength=m) / cnt
    ssb = float(np.sum(cnt * (means - det.mean()) ** 2))
    ssw = float(np.sum((det - means[pos]) ** 2))
    dfb, dfw = m - 1, len(det) - m
    if ssw <= 0:
        return ssb > 0
    return bool(f_dist.sf((ssb / dfb) / (ssw / dfw), dfb, dfw) < p_value)


def _joint_ses(w: np.ndarray) -> tuple[float, np.ndarray]:
    """SES run down each column of w (cycles x positions) with one shared alpha fitted jointly."""

    def sse(a: float) -> float:
        lev, _ = linear_filter([a], [1.0, a - 1.0], w, zi=(1.0 - a) * w[:1], axis=0)
        e = w[1:] - lev[:-1]
        return float(np.sum(e * e))

    if len(w) < 3 or np.ptp(w) == 0:
        return 0.5, w[-1].astype(float)
    a = float(bounded_minimum(sse, 0.01, 0.99, xatol=1e-3)[0])
    lev, _ = linear_filter([a], [1.0, a - 1.0], w, zi=(1.0 - a) * w[:1], axis=0)
    return a, lev[-1]


def position_theta(y: np.ndarray, h: int, m: int, drift: float = 0.5) -> np.ndarray:
    """Seasonal-position Theta: SES down each seasonal position (one shared alpha) + Theta drift.

    The history is cut into whole cycles of m; every position (hour of day, ...) is smoothed across
    cycles, and the theta-line drift of the cycle means is added per cycle ahead. ``drift=0`` gives
    seasonal-position SES. With m < 2 or fewer than 2 cycles this is the ordinary Theta method.
    """
    n = len(y)
    k_cycles = n // m if m >= 2 else 0
    if k_cycles < 2:
        return theta_forecast(y, h) if drift else ses_forecast(y, h)
    w = y[n - k_cycles * m:].reshape(k_cycles, m)
    a, lev = _joint_ses(w)
    k = np.arange(h)
    f = lev[k % m].astype(float)
    if drift and k_cycles > 2:
        cm = w.mean(axis=1)
        b = float(np.polyfit(np.arange(k_cycles, dtype=float), cm, 1)[0])
        ahead = k // m + 1
        f = f + drift * b * (ahead - 1 + 1.0 / a - (1.0 - a) ** k_cycles / a)
    return f


def weekly_profile(y: np.ndarray, h: int, m: int, cycles: int = 4) -> np.ndarray:
    """Median over the last few cycles of m, each cycle shifted to the level of the last cycle."""
    n = len(y)
    k_cycles = min(cycles, n // m) if m >= 2 else 0
    if k_cycles < 2:
        return seasonal_naive(y, h, m)
    w = y[n - k_cycles * m:].reshape(k_cycles, m)
    w = w - w.mean(axis=1, keepdims=True) + w[-1].mean()
    p = np.median(w, axis=0)
    return p[np.arange(h) % m]


def _cma(y: np.ndarray, m: int) -> tuple[np.ndarray, int]:
    w = np.r_[0.5, np.ones(m - 1), 0.5] / m if m % 2 == 0 else np.ones(m) / m
    return np.convolve(y, w, mode="valid"), (len(w) - 1) // 2


def additive_profiles(y: np.ndarray, periods: tuple[int, ...],
                      cycles: int = 4) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Robust additive seasonal profiles (median of detrended values per position over the last few
    cycles), estimated shortest period first; returns the profiles and the adjusted series."""
    n = len(y)
    r = y.astype(float).copy()
    comps = []
    for m in sorted(periods):
        if m < 2 or n < 2 * m + 1:
            continue
        ma, off = _cma(r, m)
        det = r[off: off + len(ma)] - ma
        pos = np.arange(off, off + len(ma)) % m
        k_cyc = min(len(det) // m, cycles)
        prof = np.zeros(m)
        if k_cyc >= 1:
            block = det[len(det) - k_cyc * m:].reshape(k_cyc, m)
            prof[pos[len(det) - k_cyc * m:][:m]] = np.median(block, axis=0)
        prof -= prof.mean()
        comps.append((m, prof))
        r = r - prof[np.arange(n) % m]
    return comps, r


def profile_level(y: np.ndarray, h: int, periods: tuple[int, ...], log: bool = False) -> np.ndarray:
    """Additive profiles (all periods) + the mean of the last day of the adjusted series.

    With ``log`` and a positive history the profiles are multiplicative (fitted on log values).
    """
    if log and np.min(y) > 0:
        return np.exp(profile_level(np.log(y), h, periods))
    n = len(y)
    comps, adj = additive_profiles(y, periods)
    span = min(periods) if periods else 1
    f = np.full(h, float(np.mean(adj[-max(span, 1):])))
    for m, prof in comps:
        f = f + prof[np.arange(n, n + h) % m]
    return f
