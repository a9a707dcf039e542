"""Multiple-seasonal decomposition for forecast-model-3: MSTL built from statsmodels' STL.

MSTL (Bandara, Hyndman and Bergmeir 2021) removes one STL seasonal component per period, shortest
first, each fitted on the series without the others. This is that algorithm with one refinement pass
(statsmodels ``MSTL(iterate=1)``), except that every period's STL gets LOESS jumps scaled to *its own*
period: statsmodels' MSTL passes one set of STL arguments to every period, so the jumps must suit the
shortest one and the daily component of five-minute data (periods 12 and 288) was fitted nearly point by
point; with jumps of its own it is fitted at a fraction of them, for the same components to plotting accuracy.
"""

from __future__ import annotations

import numpy as np
from statsmodels.tsa.seasonal import STL


def _jumps(period: int, seasonal: int) -> dict[str, int]:
    # LOESS evaluated every ~tenth point of each window and interpolated: a smooth window's shape needs no more
    return {"seasonal_jump": max(1, seasonal // 10), "trend_jump": max(1, (3 * period) // 20),
            "low_pass_jump": max(1, period // 10)}


def seasonal_components(x: np.ndarray, periods: tuple[int, ...], seasonal: int) -> list[np.ndarray]:
    """One seasonal component per period (ascending, each with two full cycles in x), MSTL style."""
    deseas = np.asarray(x, dtype=float).copy()
    out = []
    for p in periods:
        s = STL(deseas, period=p, seasonal=seasonal, **_jumps(p, seasonal)).fit().seasonal
        out.append(np.asarray(s))
        deseas = deseas - out[-1]
    return out


def continue_cycle(s: np.ndarray, p: int, h: int) -> np.ndarray:
    """The last full cycle of a seasonal component, repeated over h steps."""
    return s[len(s) - p:][np.arange(h) % p]
