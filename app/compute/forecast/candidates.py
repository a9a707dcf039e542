"""Named point forecasters ``f(y, h, periods) -> h values`` on scale-normalised histories.

``periods`` are the usable periods (at least two cycles in ``y``), ascending. "_s" candidates use the
shortest period, "_l" the longest; without periods every candidate degrades to a non-seasonal method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from app.compute.forecast.seasonal import (
    acf_seasonal,
    naive,
    position_theta,
    profile_level,
    seasonal_naive,
    weekly_profile,
)
from app.compute.forecast.smoothing import (
    ar_diff_forecast,
    damped_forecast,
    drift_forecast,
    optimised_theta_forecast,
    ses_forecast,
    theta_forecast,
)

ADDITIVE_MARGIN = 1.5  # multiplicative kept unless its remainder SSE exceeds the additive one by this factor
Candidate = Callable[[np.ndarray, int, tuple[int, ...]], np.ndarray]


def _short(periods: tuple[int, ...]) -> int:
    return periods[0] if periods else 1


def _long(periods: tuple[int, ...]) -> int:
    return periods[-1] if periods else 1


def _classical(y: np.ndarray, m: int, multiplicative: bool) -> tuple[np.ndarray, float]:
    """Seasonal indices of a classical decomposition and the sum of squared remainders it leaves."""
    w = np.r_[0.5, np.ones(m - 1), 0.5] / m if m % 2 == 0 else np.ones(m) / m
    ma = np.convolve(y, w, mode="valid")
    off = (len(w) - 1) // 2
    seg = y[off: off + len(ma)]
    ratio = seg / ma if multiplicative else seg - ma
    pos = np.arange(off, off + len(ma)) % m
    idx = np.bincount(pos, weights=ratio, minlength=m) / np.maximum(np.bincount(pos, minlength=m), 1)
    idx = idx / idx.mean() if multiplicative else idx - idx.mean()
    fit = ma * idx[pos] if multiplicative else ma + idx[pos]
    return idx, float(np.sum((seg - fit) ** 2))


def _classical_indices(y: np.ndarray, m: int, multiplicative: bool) -> np.ndarray:
    return _classical(y, m, multiplicative)[0]


def multiplicative_indices(y: np.ndarray, m: int) -> np.ndarray | None:
    """Seasonal indices (mean 1, position i = points i, i + m, ...) of a classical multiplicative
    decomposition, when the history is positive, holds two whole cycles and that decomposition leaves
    remainders no larger than ADDITIVE_MARGIN x the additive one's; else None. The margin keeps the additive
    shape where it fits clearly better: a strong trend under a constant-amplitude season, where ratios to the
    early, lower level would inflate the season at today's level (chosen on the M4, M1 and Tourism training data)."""
    if m < 2 or len(y) < 2 * m + 1 or np.min(y) <= 0:
        return None
    mult, mult_sse = _classical(y, m, True)
    if np.all(mult > 0) and mult_sse <= ADDITIVE_MARGIN * _classical(y, m, False)[1]:
        return mult
    return None


def multiplicative_fits(y: np.ndarray, m: int) -> bool:
    """Positive history whose multiplicative season fits (multiplicative_indices); a positive history too
    short for two cycles counts as fitting."""
    if np.min(y) <= 0 or m < 2 or len(y) < 2 * m + 1:
        return bool(np.min(y) > 0)
    return multiplicative_indices(y, m) is not None


@lru_cache(maxsize=32)
def _adjustment(m: int, data: bytes) -> tuple[np.ndarray, bool] | None:
    """Seasonal indices of the history whose float64 bytes are ``data`` and whether they divide (multiplicative)
    or subtract, or None when the 90% ACF test finds no season of m points (see deseasonalised).

    Memoised: at each rolling origin every deseasonalised member (SES, Theta, damped trend, AR on the adjusted
    series) adjusts the same history, so the test and both decompositions run once for all of them (the saving:
    bench/results/forecast-rules.md). Keyed on the values themselves, so a hit is the same history, never a
    lookalike; 32 histories at the 3,000-point cap hold under 1 MB. The indices are read-only, since every member
    shares them."""
    y = np.frombuffer(data)
    if not acf_seasonal(y, m):  # also False for m < 2 or fewer than 3 cycles
        return None
    # multiplicative for positive data unless the additive shape fits clearly better (multiplicative_indices)
    mult = multiplicative_indices(y, m)
    indices = _classical_indices(y, m, False) if mult is None else mult
    indices.setflags(write=False)
    return indices, mult is not None


def deseasonalised(base: Callable[[np.ndarray, int], np.ndarray]) -> Candidate:
    """M4-benchmark style: classical decomposition (shortest period, when the 90% ACF test says
    seasonal; multiplicative for positive data) around a non-seasonal forecaster."""

    def f(y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        m = _short(periods)
        n = len(y)
        adjustment = _adjustment(m, np.ascontiguousarray(y, dtype=float).tobytes()) if m >= 2 and n >= 3 * m else None
        if adjustment is None:
            return base(y, h)
        idx, multiplicative = adjustment
        if multiplicative:
            return base(y / idx[np.arange(n) % m], h) * idx[np.arange(n, n + h) % m]
        return base(y - idx[np.arange(n) % m], h) + idx[np.arange(n, n + h) % m]

    return f


RECENT_FLOOR = 60  # fewest points a "recent" candidate reads (see recent)
RECENT_CYCLES = 5  # cycles of the shortest period a "recent" candidate reads
SHORT_RECENT_CYCLES = 3  # the same for THREE_CYCLE_POOL: the fewest the classical decomposition still adjusts


def recent_window(periods: tuple[int, ...], cycles: int = RECENT_CYCLES, floor: int = RECENT_FLOOR) -> int:
    """Points a recent(name, cycles, floor) candidate reads: the last ``cycles`` cycles, at least ``floor``."""
    return max(cycles * _short(periods), floor)


@dataclass(frozen=True)
class Recent:
    """Candidate ``name`` run on the last ``cycles`` cycles of the shortest period (>= ``floor`` points)."""

    name: str
    cycles: int = RECENT_CYCLES
    floor: int = RECENT_FLOOR

    def __call__(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        yc = y[-recent_window(periods, self.cycles, self.floor):]
        return CANDIDATES[self.name](yc, h, tuple(p for p in periods if len(yc) >= 2 * p))

    def reads_all_of(self, n: int, periods: tuple[int, ...]) -> bool:
        """On a history of n points with these periods, it reads every point and keeps every period: its
        forecast is candidate ``name``'s on that history."""
        return n <= recent_window(periods, self.cycles, self.floor) and all(n >= 2 * p for p in periods)


def recent(name: str, cycles: int = RECENT_CYCLES, floor: int = RECENT_FLOOR) -> Candidate:
    """Candidate ``name`` run on the last ``cycles`` cycles of the shortest period (>= ``floor`` points)."""
    return Recent(name, cycles, floor)


def forecaster_on(candidate: Candidate, n: int, periods: tuple[int, ...]) -> Candidate:
    """The forecaster that does ``candidate``'s work on a history of n points with these periods: a recent
    candidate that reads the whole history is its full-history candidate. A pool that holds both (model-1's
    "ses_sa" and "ses_sa5" on a history of at most RECENT_FLOOR points) fits it once."""
    if isinstance(candidate, Recent) and candidate.reads_all_of(n, periods):
        return CANDIDATES[candidate.name]
    return candidate


STRENGTH_CYCLES = 10  # the cycles seasonal_strength measures at most


def seasonal_strength(y: np.ndarray, m: int, cycles: int = STRENGTH_CYCLES) -> float:
    """1 - var(remainder)/var(detrended) of a classical additive decomposition over the last cycles."""
    if m < 2:
        return 0.0
    x = y[-cycles * m:]
    if len(x) < 3 * m:
        return 0.0
    w = np.r_[0.5, np.ones(m - 1), 0.5] / m if m % 2 == 0 else np.ones(m) / m
    ma = np.convolve(x, w, mode="valid")
    off = (len(w) - 1) // 2
    det = x[off: off + len(ma)] - ma
    pos = np.arange(off, off + len(ma)) % m
    idx = np.bincount(pos, weights=det, minlength=m) / np.maximum(np.bincount(pos, minlength=m), 1)
    v = float(np.var(det))
    if v <= 0:
        return 0.0
    return max(0.0, 1.0 - float(np.var(det - idx[pos])) / v)


def chance_strength(n: int, m: int) -> float:
    """About what seasonal_strength gives noise with no season of m points in n: its seasonal indices are means of
    one value a cycle, so they keep about 1/cycles of the variance."""
    return m / min(n, STRENGTH_CYCLES * m)


CANDIDATES: dict[str, Candidate] = {
    "naive": lambda y, h, p: naive(y, h),
    "ses": lambda y, h, p: ses_forecast(y, h),
    "theta": lambda y, h, p: theta_forecast(y, h),
    "damped": lambda y, h, p: damped_forecast(y, h),
    "ar3_diff": lambda y, h, p: ar_diff_forecast(y, h),
    "ses_sa": deseasonalised(ses_forecast),
    "theta_sa": deseasonalised(theta_forecast),
    "damped_sa": deseasonalised(damped_forecast),
    "ar3_diff_sa": deseasonalised(ar_diff_forecast),
    "drift_sa": deseasonalised(drift_forecast),
    "otm_sa": deseasonalised(optimised_theta_forecast),
    "snaive_s": lambda y, h, p: seasonal_naive(y, h, _short(p)),
    "snaive_l": lambda y, h, p: seasonal_naive(y, h, _long(p)),
    "ptheta_s": lambda y, h, p: position_theta(y, h, _short(p)),
    "pses_s": lambda y, h, p: position_theta(y, h, _short(p), drift=0.0),
    "ptheta_l": lambda y, h, p: position_theta(y, h, _long(p)),
    "wprof_l": lambda y, h, p: weekly_profile(y, h, _long(p)),
    "plevel": lambda y, h, p: profile_level(y, h, p),
    "plevel_log": lambda y, h, p: profile_level(y, h, p, log=True),
}
CANDIDATES.update({
    "ses_sa5": recent("ses_sa"),
    "theta_sa5": recent("theta_sa"),
    "damped_sa5": recent("damped_sa"),
    "ar3_diff_sa5": recent("ar3_diff_sa"),
    "otm_sa5": recent("otm_sa"),
    "otm_sa3": recent("otm_sa", cycles=SHORT_RECENT_CYCLES),
    "damped_sa3": recent("damped_sa", cycles=SHORT_RECENT_CYCLES),
})

# Level/trend family (any series) and seasonal-position family (strongly seasonal series only).
# Its Theta members are the optimised Theta method: it beat the standard one on the training rows (forecast-rules.md).
LEVEL_POOL = ("ses_sa", "otm_sa", "damped_sa", "ar3_diff_sa", "ses_sa5", "otm_sa5", "damped_sa5", "ar3_diff_sa5")
# The trend members on the last 3 cycles, offered where that window differs from the 5-cycle one (a season of
# more than 12 points: hourly, weekly data; for shorter ones both are RECENT_FLOOR points); see seasons.py.
THREE_CYCLE_POOL = ("otm_sa3", "damped_sa3")
# Short histories without a strong season (too few points for whole windows at every rolling origin):
# the equal-weight combination of simple exponential smoothing, Theta, damped trend and random walk with
# drift, or drift alone, whichever has the lower error at the origins (see ValidatedCombination). Standard
# Theta here: fitted to a few years, the optimised one takes the whole regression line (forecast-rules.md).
SHORT_POOL: tuple[tuple[str, ...], ...] = (("ses_sa", "theta_sa", "damped_sa", "drift_sa"), ("drift_sa",))
# Short histories with a usable season of 5-12 points that is not strong (monthly data of 2-5 years):
# simple exponential smoothing alone, or the equal-weight combination of the four level/trend members, whichever
# has the lower error at the origins (see ValidatedCombination).
SHORT_PERIODIC_POOL: tuple[tuple[str, ...], ...] = (("ses_sa",), ("ses_sa", "theta_sa", "damped_sa", "ar3_diff_sa"))
# Quarterly data (a shortest season of at most 4 points), and long strongly seasonal monthly data, also get
# model-2's two Theta forecasts, standard Theta on the adjusted last 5 cycles and seasonal-position Theta, averaged
# as one member: a Theta-family pair that beat model-1's six members on Tourism Quarterly (see seasons.py).
THETA_PAIR_POOL: tuple[tuple[str, ...], ...] = (("theta_sa5", "ptheta_s"),)
SEASONAL_POOL = ("snaive_s", "snaive_l", "ptheta_s", "pses_s", "ptheta_l", "wprof_l", "plevel", "plevel_log")
