"""Spike cleaning: the newest point of every model's history, every point of forecast-model-4's
(app.compute.forecast.model_4_spike_robust).

A spike is a point far from a robust baseline: robust additive seasonal profiles (medians per position)
plus a level of the seasonally adjusted series. Inside the history the level is a centred running median
(window 7) and the scale 1.4826 x the MAD of the points' distances from the baseline. The newest points
have no centred window (padded, the newest point's window held it four times out of seven, so a spike
there was its own baseline). The newest point is judged first, against a level projected from the points
before it alone (the median of the 7 before carried forward by the median slope between that block and
the one before) on the scale of that projection's own errors over the history, so a series whose newest
point is hard to project is not cleaned where a centred median would call it a spike, and a spike there
reaches no older point's baseline. It must also lie outside everything the history has seen, by more than
RANGE_SHARE of the history's range: a newest point inside or near that range is left to the models.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.ndimage import median_filter

from app.compute.forecast.seasonal import additive_profiles

RUNNING_MEDIAN = 7  # points of the running median under the seasonally adjusted series
SPIKE_SIGMAS = 5.0  # robust sigmas from the baseline beyond which a point is a spike
# share of the range of the values before it by which a newest point must lie outside that range to be a spike
RANGE_SHARE = 0.5
NEWEST = RUNNING_MEDIAN // 2  # newest points without a centred window, judged by projection


def _robust_sigma(resid: np.ndarray) -> float:
    mad = float(np.median(np.abs(resid - np.median(resid))))
    sigma = 1.4826 * mad
    return sigma if sigma > 0 else float(np.std(resid))


def _projected_levels(adj: np.ndarray, size: int = RUNNING_MEDIAN) -> np.ndarray:
    """For every point from 2 * size on: the level projected from the 2 * size points before it."""
    blocks = np.median(sliding_window_view(adj[:-1], size), axis=1)  # blocks[j] = median of adj[j:j + size]
    last, before = blocks[size:], blocks[:-size]  # for the point i = j + 2 * size
    return last + (last - before) / size * (size + 1) / 2.0


def _baseline(y: np.ndarray, periods: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(seasonal profiles, seasonally adjusted series) of y, the profiles estimated without the newest
    NEWEST points, so a spike there changes no other point's baseline."""
    n = len(y)
    comps, _ = additive_profiles(y[: n - NEWEST], periods)
    seas = _profile_sum(comps, n)
    return seas, y - seas


def _profile_sum(comps: list[tuple[int, np.ndarray]], n: int) -> np.ndarray:
    """The seasonal profiles repeated over n points and added up."""
    seas = np.zeros(n)
    for m, prof in comps:
        seas += prof[np.arange(n) % m]
    return seas


def clean_newest(y: np.ndarray, periods: tuple[int, ...], threshold: float = SPIKE_SIGMAS,
                 seasonal: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """The history with its newest point replaced by its projected level where it is further than ``threshold``
    robust sigmas of the projection's errors from it (see the module's docstring). Only the newest: judged
    on the newest 3, a smooth declining hourly series (M4 H242) lost its third-newest point."""
    size = RUNNING_MEDIAN
    n = len(y)
    if n < 2 * size + NEWEST + 8:
        return y
    seas, adj = seasonal if seasonal is not None else _baseline(y, periods)
    proj = _projected_levels(adj)  # points 2 * size .. n - 1
    resid = adj[2 * size:] - proj
    sigma = _robust_sigma(resid[:-NEWEST])
    if sigma <= 0:
        return y
    last, before = resid[-1], resid[-2]
    # a spike is one point: the point before it far off on the same side makes a level shift, which is kept
    if abs(last) <= threshold * sigma or (abs(before) > threshold * sigma and np.sign(before) == np.sign(last)):
        return y
    # and never seen before (RANGE_SHARE): a miss inside or near the range is a turn the holdouts followed
    history = y[:-1]
    low, high = float(np.min(history)), float(np.max(history))
    if max(y[-1] - high, low - y[-1]) <= RANGE_SHARE * (high - low):
        return y
    out = y.copy()
    out[-1] = proj[-1] + seas[-1]
    return out


def newest_replaced(cleaned: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Per point of the history: was it the newest point and replaced by clean_newest? Only that point's
    error is set apart (app.compute.forecast.intervals.spike_errors): model-4's older replaced points are
    many small corrections of smooth series, and leaving them all out of its ranking cost accuracy
    (bench/results/forecast-rules.md)."""
    out = np.zeros(len(raw), dtype=bool)
    if len(raw):
        out[-1] = cleaned[-1] != raw[-1]
    return out


def clean_spikes(y: np.ndarray, periods: tuple[int, ...], threshold: float = SPIKE_SIGMAS) -> np.ndarray:
    """Every spike replaced by its baseline: the newest point by clean_newest first, then every point by the
    centred rule on that series, exactly as before the newest-point rule (n < 13 included)."""
    n = len(y)
    if n < RUNNING_MEDIAN:
        return y
    y = clean_newest(y, periods, threshold)
    comps, adj = additive_profiles(y, periods)
    base = median_filter(adj, size=RUNNING_MEDIAN, mode="nearest") + _profile_sum(comps, n)
    resid = y - base
    sigma = _robust_sigma(resid)
    if sigma <= 0:
        return y
    bad = np.abs(resid) > threshold * sigma
    out = y.copy()
    out[bad] = base[bad]
    return out
