"""Spike cleaning for forecast-model-4 (robust to outliers in ops metrics)."""

from __future__ import annotations

import numpy as np
from scipy.ndimage import median_filter

from app.compute.forecast.seasonal import additive_profiles


def clean_spikes(y: np.ndarray, periods: tuple[int, ...], threshold: float = 5.0) -> np.ndarray:
    """Replace points further than ``threshold`` robust sigmas from a robust baseline by the baseline.

    Baseline = robust additive seasonal profiles (medians per position) + a running median (window 7)
    of the seasonally adjusted series. Sigma = 1.4826 * MAD of the residuals.
    """
    n = len(y)
    if n < 7:
        return y
    comps, adj = additive_profiles(y, periods)
    seas = np.zeros(n)
    for m, prof in comps:
        seas += prof[np.arange(n) % m]
    trend = median_filter(adj, size=7, mode="nearest")
    base = trend + seas
    resid = y - base
    mad = float(np.median(np.abs(resid - np.median(resid))))
    sigma = 1.4826 * mad
    if sigma <= 0:
        sigma = float(np.std(resid))
        if sigma <= 0:
            return y
    out = y.copy()
    bad = np.abs(resid) > threshold * sigma
    out[bad] = base[bad]
    return out
