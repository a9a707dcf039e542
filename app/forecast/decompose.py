"""MSTL-based forecaster for forecast-model-3 (statsmodels MSTL / STL)."""

from __future__ import annotations

import numpy as np
from statsmodels.tsa.seasonal import MSTL, STL

from app.forecast.candidates import multiplicative_fits
from app.forecast.seasonal import position_theta
from app.forecast.smoothing import damped_forecast


def _continue(s: np.ndarray, p: int, h: int) -> np.ndarray:
    return s[len(s) - p:][np.arange(h) % p]


def _stl_kwargs(periods: tuple[int, ...], seasonal: int) -> dict[str, int]:
    # LOESS jumps of about a tenth of the windows: 5-8x faster, same components to plotting accuracy
    p = min(periods)
    return {"seasonal": seasonal, "seasonal_jump": max(1, seasonal // 10),
            "trend_jump": max(1, (3 * p) // 20), "low_pass_jump": max(1, p // 10)}


def mstl_forecast(y: np.ndarray, h: int, periods: tuple[int, ...], position: bool,
                  log: bool = True, seasonal: int = 7) -> np.ndarray:
    """Forecast with an MSTL decomposition (STL when one period).

    Positive series are decomposed on the log scale, i.e. the seasonal components act as factors;
    the adjusted series is still forecast on the original scale (no exponential trend). Every seasonal
    component is continued from its last cycle. With ``position`` (strong seasonality) the shortest
    component is *not* removed: the series without the longer components is forecast by
    seasonal-position Theta at the shortest period (each hour of day smoothed across days, so its
    shape and level adapt); otherwise the fully adjusted series is forecast by damped-trend ES.
    """
    n = len(y)
    per = tuple(p for p in periods if n >= 2 * p)
    if not per or np.ptp(y) == 0:
        return damped_forecast(y, h)
    mult = log and bool(np.min(y) > 0) and multiplicative_fits(y, per[0])
    x = np.log(y) if mult else y
    if len(per) == 1:
        seas = [STL(x, period=per[0], **_stl_kwargs(per, seasonal)).fit().seasonal]
    else:
        kw = _stl_kwargs(per, seasonal)
        res = MSTL(x, periods=per, iterate=1, windows=[kw.pop("seasonal")] * len(per), stl_kwargs=kw).fit()
        seas = [res.seasonal[:, i] for i in range(len(per))]
    removed = list(zip(seas[1:], per[1:], strict=True)) if position else list(zip(seas, per, strict=True))
    total = np.sum([s for s, _ in removed], axis=0) if removed else np.zeros(n)
    future = np.zeros(h)
    for s, p in removed:
        future = future + _continue(s, p, h)
    adj = y / np.exp(total) if mult else y - total
    f = position_theta(adj, h, per[0]) if position else damped_forecast(adj, h)
    return f * np.exp(future) if mult else f + future
