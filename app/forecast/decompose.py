"""MSTL-based forecaster for forecast-model-3 (statsmodels MSTL)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from statsmodels.tsa.seasonal import MSTL, STL


def mstl_forecast(y: np.ndarray, h: int, periods: tuple[int, ...],
                  base: Callable[[np.ndarray, int, tuple[int, ...]], np.ndarray]) -> np.ndarray:
    """Decompose with MSTL (STL for one period), continue every seasonal component from its last
    cycle, and forecast the seasonally adjusted series with ``base``."""
    n = len(y)
    per = tuple(p for p in periods if n >= 2 * p)
    if not per or np.ptp(y) == 0:
        return base(y, h, ())
    if len(per) == 1:
        seas = [STL(y, period=per[0]).fit().seasonal]
    else:
        res = MSTL(y, periods=per, iterate=1).fit()
        seas = [res.seasonal[:, i] for i in range(len(per))]
    adj = y - np.sum(seas, axis=0)
    f = np.asarray(base(adj, h, ()), dtype=float)
    for s, p in zip(seas, per, strict=True):
        last = s[n - p:]
        f = f + last[np.arange(h) % p]
    return f
