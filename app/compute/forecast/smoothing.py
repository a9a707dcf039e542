"""Fast exponential-smoothing building blocks (numpy/scipy only, no Python loop over the series).

Every recursion is written as a linear filter (scipy.signal.lfilter), so one likelihood evaluation on
a few thousand points runs in compiled loops and parameters can be optimised per request.
Inputs are expected to be scale-normalised (order 1) by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.signal import lfilter

from app.compute.forecast.optimisers import bounded_minimum, nelder_mead

try:
    # lfilter's own kernel, to which lfilter hands its arguments, converted to arrays, whenever the denominator has
    # two or more terms (every filter here): lfilter's array-API dispatch and checks around it cost more than the
    # filtering of a few hundred points, and model-1 filters some 3,500 times a forecast. The kernel converts
    # lists itself, to the same float64 arrays, so the numbers are lfilter's
    # (tests/unit/compute/forecast/test_smoothing.py holds the two equal).
    from scipy.signal._sigtools import _linear_filter as _lfilter_kernel
except ImportError:  # a SciPy that moved it: lfilter itself, the same numbers at its own cost
    _lfilter_kernel = None


def linear_filter(b: Sequence[float], a: Sequence[float], x: np.ndarray, zi: Sequence[float] | np.ndarray | None = None,
                  axis: int = -1) -> Any:
    """scipy.signal.lfilter(b, a, x, axis, zi) for float coefficients and a denominator ``a`` of at least two
    terms: the output, and with ``zi`` the pair (output, final state)."""
    if _lfilter_kernel is None:
        return lfilter(b, a, x, axis=axis, zi=zi)
    if zi is None:
        return _lfilter_kernel(b, a, x, axis)
    return _lfilter_kernel(b, a, x, axis, zi)


def ses_levels(y: np.ndarray, alpha: float, l0: float) -> np.ndarray:
    """Levels l_1..l_n of simple exponential smoothing, l_t = a*y_t + (1-a)*l_{t-1}."""
    # the filter state lfiltic([alpha], [1, alpha - 1], [l0]) gives, written out (that call cost more than the
    # filter on a short series, and SES is fitted at every origin of every short series)
    out, _ = linear_filter([alpha], [1.0, alpha - 1.0], y, zi=[0.0 - (alpha - 1.0) * l0])
    return out


def _ses_sse(alpha: float, y: np.ndarray) -> float:
    lev = ses_levels(y, alpha, y[0])
    e = y[1:] - lev[:-1]
    return float(e @ e)


def fit_ses(y: np.ndarray) -> tuple[float, float]:
    """Return (alpha, final level) minimising the one-step squared error."""
    if len(y) < 3 or np.ptp(y) == 0:
        return 0.5, float(y[-1])
    alpha = float(bounded_minimum(lambda a: _ses_sse(a, y), 0.001, 0.999, xatol=1e-3)[0])
    return alpha, float(ses_levels(y, alpha, y[0])[-1])


def ses_forecast(y: np.ndarray, h: int) -> np.ndarray:
    _, level = fit_ses(y)
    return np.full(h, level)


def theta_forecast(y: np.ndarray, h: int) -> np.ndarray:
    """Standard Theta method (theta=2 line + SES), Hyndman & Billah (2003) form."""
    n = len(y)
    alpha, level = fit_ses(y)
    if n < 3:
        return np.full(h, level)
    t = np.arange(n, dtype=float)
    b0 = float(np.polyfit(t, y, 1)[0])
    k = np.arange(1, h + 1, dtype=float)
    drift = 0.5 * b0 * (k - 1 + 1.0 / alpha - (1.0 - alpha) ** n / alpha)
    return level + drift


OTM_STEPS = 3  # in-sample forecast steps whose mean squared errors the optimised Theta method minimises
OTM_ALPHA = (0.1, 0.99)  # range of its smoothing parameter (as in Fiorucci et al. 2016)


def _theta_line(y: np.ndarray) -> tuple[float, float]:
    """Intercept and slope of the least-squares line through y at times 1..n."""
    n = len(y)
    t = np.arange(1, n + 1, dtype=float)
    slope = 6.0 * (2.0 * float(np.mean(t * y)) - (1.0 + n) * float(np.mean(y))) / (n * n - 1.0)
    return float(np.mean(y)) - (n + 1.0) * slope / 2.0, slope


def _decay_powers(alpha: float, start: int, stop: int) -> np.ndarray:
    """(1 - alpha)^i for i = start..stop. Computed once per alpha and sliced: at 3,000 points the powers
    were three quarters of a fit's cost when each use took its own."""
    return (1.0 - alpha) ** np.arange(start, stop + 1, dtype=float)


def _theta_trend(alpha: float, intercept: float, slope: float, powers: np.ndarray) -> np.ndarray:
    """The theta line's contribution g_i at times start..stop-1 (Fiorucci et al. 2016, eq. for mu_t), from
    ``powers`` = _decay_powers(alpha, start, stop)."""
    return intercept * powers[:-1] + slope * (1.0 - powers[1:]) / alpha


def _otm_fit(y: np.ndarray, alpha: float, steps: int, line: tuple[float, float]) -> tuple[float, float, float]:
    """(initial level l0, c = 1 - 1/theta, loss) of the optimised Theta method at this alpha; ``line`` is
    _theta_line(y), passed in because it does not depend on alpha.

    The forecast of y_{i+j} made after y_{i-1} (i >= 1, j < steps) is L_{i-1} + l0 (1-a)^i + c G_ij, with L
    simple exponential smoothing started at 0 and G_ij = g_{i+j} + a (g_i + ... + g_{i+j-1}): linear in l0
    and c, so the mean over j of each step's mean squared error is a quadratic in them, solved exactly
    (c clipped to [0, 1], i.e. theta >= 1).
    """
    n = len(y)
    intercept, slope = line
    lev0 = linear_filter([alpha], [1.0, alpha - 1.0], y)
    powers = _decay_powers(alpha, 0, n)
    decay = powers[1:n]
    g = _theta_trend(alpha, intercept, slope, powers)
    cg = np.concatenate([[0.0], np.cumsum(g)])
    # aa, ag, gg, ar, gr, rr, each the mean over j of the mean over i (plain floats: this runs some 20 times a fit)
    saa = sag = sgg = sar = sgr = srr = 0.0
    used = min(steps, n - 1)
    for j in range(used):
        m = n - 1 - j
        a = decay[:m]
        gj = g[1 + j:n] + alpha * (cg[1 + j:n] - cg[1:m + 1])
        r = y[1 + j:n] - lev0[:m]
        points = m * used
        saa += (a @ a) / points
        sag += (a @ gj) / points
        sgg += (gj @ gj) / points
        sar += (a @ r) / points
        sgr += (gj @ r) / points
        srr += (r @ r) / points
    det = saa * sgg - sag * sag
    c = (saa * sgr - sag * sar) / det if det > 1e-12 * saa * sgg else 0.0
    c = min(max(c, 0.0), 1.0)
    l0 = (sar - c * sag) / saa
    loss = srr - 2 * l0 * sar - 2 * c * sgr + l0 * l0 * saa + 2 * l0 * c * sag + c * c * sgg
    return l0, c, float(loss)


def fit_optimised_theta(y: np.ndarray, line: tuple[float, float],
                        steps: int = OTM_STEPS) -> tuple[float, float, float]:
    """(alpha, initial level l0, c = 1 - 1/theta) of the optimised Theta method (see optimised_theta_forecast),
    ``line`` being _theta_line(y).

    For each alpha the initial level and c are exact (_otm_fit); alpha is searched on a grid and refined
    around its best point, so the fit is the loss's minimum, not wherever a simplex search stopped.
    """
    grid = np.linspace(OTM_ALPHA[0], OTM_ALPHA[1], 10)
    losses = [_otm_fit(y, float(a), steps, line)[2] for a in grid]
    k = int(np.argmin(losses))
    best, loss = bounded_minimum(lambda a: _otm_fit(y, a, steps, line)[2], float(grid[max(k - 1, 0)]),
                                 float(grid[min(k + 1, len(grid) - 1)]), xatol=1e-3)
    alpha = float(best) if loss <= losses[k] else float(grid[k])
    l0, c, _ = _otm_fit(y, alpha, steps, line)
    return alpha, l0, c


def optimised_theta_forecast(y: np.ndarray, h: int, steps: int = OTM_STEPS) -> np.ndarray:
    """Optimised Theta method (OTM, Fiorucci et al. 2016): the Theta method with the weight of its theta
    line (theta >= 1), its smoothing parameter and its initial level fitted to the history's in-sample
    forecasts 1 to ``steps`` steps ahead, instead of theta fixed at 2 and SES's one-step fit.
    """
    n = len(y)
    if n < 4 or np.ptp(y) == 0:
        return theta_forecast(y, h)
    line = _theta_line(y)
    alpha, l0, c = fit_optimised_theta(y, line, steps)
    level = float(ses_levels(y, alpha, l0)[-1])
    g = _theta_trend(alpha, *line, _decay_powers(alpha, n, n + h))
    return level + c * (g + alpha * np.concatenate([[0.0], np.cumsum(g)[:-1]]))


def damped_states(y: np.ndarray, alpha: float, beta: float, phi: float,
                  x0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Level and trend (l_t, b_t), t=1..n, of additive damped-trend Holt smoothing.

    x_t = D x_{t-1} + g y_t with D = F - g c'; each component is a second-order linear filter of y
    plus the free response D^t x0 (Cayley-Hamilton recursion, also a linear filter).

    The filters' coefficients are worked out on plain floats (the same IEEE operations, in the same order, as on
    numpy's scalars, without their cost: this runs some 80 times a damped-trend fit); D x0 stays numpy's matrix
    product, whose rounding (fused multiply-adds) plain floats would not repeat.
    """
    d00, d01, d10, d11 = 1.0 - alpha, phi * (1.0 - alpha), -beta, phi * (1.0 - beta)
    tr = d00 + d11
    det = d00 * d11 - d01 * d10
    den = [1.0, -tr, det]
    num_l = [alpha, d01 * beta - d11 * alpha]
    num_b = [beta, d10 * alpha - d00 * beta]
    # the free response D^t x0 (t = 1, 2, ...) enters through the filters' initial conditions:
    # for a DF2T filter with zero input, out_0 = zi_0 and out_1 = zi_1 - den_1 * out_0.
    d = np.array([[d00, d01], [d10, d11]])
    x1 = d @ x0
    (l1, b1), (l2, b2) = x1.tolist(), (d @ x1).tolist()
    lev, _ = linear_filter(num_l, den, y, zi=[l1, l2 + den[1] * l1])
    tre, _ = linear_filter(num_b, den, y, zi=[b1, b2 + den[1] * b1])
    return lev, tre


DAMPED_BOUNDS = ((0.01, 0.99), (0.0, 1.0), (0.8, 0.98))  # alpha, beta / alpha, phi


def _damped_sse(params: Sequence[float], y: np.ndarray, x0: np.ndarray) -> float:
    alpha, beta_frac, phi = params
    beta = alpha * beta_frac
    lev, tre = damped_states(y, alpha, beta, phi, x0)
    # the one-step errors y - (l + phi b), written into one array without a separate prediction array
    e = np.empty_like(y)
    e[0] = y[0] - (x0[0] + phi * x0[1])
    np.subtract(y[1:], lev[:-1] + phi * tre[:-1], out=e[1:])
    v = float(e @ e)
    return v if math.isfinite(v) else 1e300


def fit_damped(y: np.ndarray) -> tuple[float, float, float, float, float]:
    """(alpha, beta, phi, level_n, trend_n) of damped Holt fitted by least squares."""
    n = len(y)
    k = min(n, 10)
    slope = float(np.polyfit(np.arange(k, dtype=float), y[:k], 1)[0]) if k >= 2 else 0.0
    x0 = np.array([float(y[0]), slope])
    if n < 4 or np.ptp(y) == 0:
        return 0.5, 0.0, 0.9, float(y[-1]), 0.0
    alpha, beta_frac, phi = nelder_mead(lambda p: _damped_sse(p, y, x0), [0.3, 0.1, 0.95], DAMPED_BOUNDS,
                                        maxfev=90, xatol=1e-2, fatol=1e-6)
    beta = alpha * beta_frac
    lev, tre = damped_states(y, alpha, beta, phi, x0)
    return alpha, beta, phi, float(lev[-1]), float(tre[-1])


def damped_forecast(y: np.ndarray, h: int) -> np.ndarray:
    _, _, phi, level, trend = fit_damped(y)
    k = np.arange(1, h + 1)
    return level + trend * np.cumsum(phi ** k)


def ar_diff_forecast(y: np.ndarray, h: int, p: int = 3) -> np.ndarray:
    """Ridge-regularised AR(p) on the demeaned first differences (p = 3 by default), iterated forward.

    Close to an ARIMA(p,1,0) with drift, but fitted by penalised least squares (no likelihood, no order
    selection, coefficients shrunk to keep the AR part stationary); named for what it is.
    """
    n = len(y)
    dy = np.diff(y)
    p = min(p, max((len(dy) - 2) // 3, 0))
    if p == 0:
        return np.full(h, y[-1])
    mu = float(np.mean(dy))
    z = dy - mu
    x = np.column_stack([z[p - i - 1:len(z) - i - 1] for i in range(p)])
    t = z[p:]
    lam = 1e-3 * len(t) * (float(np.var(z)) + 1e-12)
    coef = np.linalg.solve(x.T @ x + lam * np.eye(p), x.T @ t)
    if np.sum(np.abs(coef)) >= 0.98:
        coef = coef * 0.98 / np.sum(np.abs(coef))
    hist = list(z[-p:][::-1])
    out = np.empty(h)
    last = float(y[n - 1])
    for k in range(h):
        nxt = float(np.dot(coef, hist[:p]))
        hist.insert(0, nxt)
        last = last + nxt
        out[k] = last
    return out


def drift_forecast(y: np.ndarray, h: int) -> np.ndarray:
    """Random walk with drift: the last value plus the mean first difference per step.

    The benchmark trend method for short yearly data, where a fitted smoother has too few points to
    tell a trend from its noise and the history's average growth is the steadiest estimate of it.
    """
    n = len(y)
    slope = (float(y[-1]) - float(y[0])) / (n - 1) if n > 1 else 0.0
    return float(y[-1]) + slope * np.arange(1, h + 1, dtype=float)
