"""Fast exponential-smoothing building blocks (numpy/scipy only, no Python loop over the series).

Every recursion is written as a linear filter (scipy.signal.lfilter), so one likelihood evaluation on
a few thousand points costs tens of microseconds and parameters can be optimised per request.
Inputs are expected to be scale-normalised (order 1) by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.signal import lfilter


def ses_levels(y: np.ndarray, alpha: float, l0: float) -> np.ndarray:
    """Levels l_1..l_n of simple exponential smoothing, l_t = a*y_t + (1-a)*l_{t-1}."""
    # the filter state lfiltic([alpha], [1, alpha - 1], [l0]) gives, written out (that call cost more than the
    # filter on a short series, and SES is fitted at every origin of every short series)
    out, _ = lfilter([alpha], [1.0, alpha - 1.0], y, zi=[0.0 - (alpha - 1.0) * l0])
    return out


def _ses_sse(alpha: float, y: np.ndarray) -> float:
    lev = ses_levels(y, alpha, y[0])
    e = y[1:] - lev[:-1]
    return float(e @ e)


def fit_ses(y: np.ndarray) -> tuple[float, float]:
    """Return (alpha, final level) minimising the one-step squared error."""
    if len(y) < 3 or np.ptp(y) == 0:
        return 0.5, float(y[-1])
    res = minimize_scalar(_ses_sse, bounds=(0.001, 0.999), args=(y,), method="bounded",
                          options={"xatol": 1e-3})
    alpha = float(res.x)
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
    lev0 = lfilter([alpha], [1.0, alpha - 1.0], y)
    powers = _decay_powers(alpha, 0, n)
    decay = powers[1:n]
    g = _theta_trend(alpha, intercept, slope, powers)
    cg = np.concatenate([[0.0], np.cumsum(g)])
    sums = np.zeros(6)  # aa, ag, gg, ar, gr, rr, each the mean over j of the mean over i
    used = min(steps, n - 1)
    for j in range(used):
        m = n - 1 - j
        a = decay[:m]
        gj = g[1 + j:n] + alpha * (cg[1 + j:n] - cg[1:m + 1])
        r = y[1 + j:n] - lev0[:m]
        sums += np.array([a @ a, a @ gj, gj @ gj, a @ r, gj @ r, r @ r]) / (m * used)
    saa, sag, sgg, sar, sgr, srr = sums
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
    res = minimize_scalar(lambda a: _otm_fit(y, a, steps, line)[2], method="bounded", options={"xatol": 1e-3},
                          bounds=(float(grid[max(k - 1, 0)]), float(grid[min(k + 1, len(grid) - 1)])))
    alpha = float(res.x) if res.fun <= losses[k] else float(grid[k])
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


def _damped_matrices(alpha: float, beta: float, phi: float) -> tuple[np.ndarray, np.ndarray]:
    d = np.array([[1.0 - alpha, phi * (1.0 - alpha)], [-beta, phi * (1.0 - beta)]])
    g = np.array([alpha, beta])
    return d, g


def damped_states(y: np.ndarray, alpha: float, beta: float, phi: float,
                  x0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Level and trend (l_t, b_t), t=1..n, of additive damped-trend Holt smoothing.

    x_t = D x_{t-1} + g y_t with D = F - g c'; each component is a second-order linear filter of y
    plus the free response D^t x0 (Cayley-Hamilton recursion, also a linear filter).
    """
    d, g = _damped_matrices(alpha, beta, phi)
    tr = d[0, 0] + d[1, 1]
    det = d[0, 0] * d[1, 1] - d[0, 1] * d[1, 0]
    den = np.array([1.0, -tr, det])
    num_l = np.array([g[0], d[0, 1] * g[1] - d[1, 1] * g[0]])
    num_b = np.array([g[1], d[1, 0] * g[0] - d[0, 0] * g[1]])
    # the free response D^t x0 (t = 1, 2, ...) enters through the filters' initial conditions:
    # for a DF2T filter with zero input, out_0 = zi_0 and out_1 = zi_1 - den_1 * out_0.
    x1 = d @ x0
    x2 = d @ x1
    zi_l = np.array([x1[0], x2[0] + den[1] * x1[0]])
    zi_b = np.array([x1[1], x2[1] + den[1] * x1[1]])
    lev, _ = lfilter(num_l, den, y, zi=zi_l)
    tre, _ = lfilter(num_b, den, y, zi=zi_b)
    return lev, tre


DAMPED_BOUNDS = ((0.01, 0.99), (0.0, 1.0), (0.8, 0.98))  # alpha, beta / alpha, phi


def _damped_sse(params: Sequence[float], y: np.ndarray, x0: np.ndarray) -> float:
    alpha, beta_frac, phi = params
    beta = alpha * beta_frac
    lev, tre = damped_states(y, alpha, beta, phi, x0)
    pred = np.empty_like(y)
    pred[0] = x0[0] + phi * x0[1]
    pred[1:] = lev[:-1] + phi * tre[:-1]
    e = y - pred
    v = float(e @ e)
    return v if np.isfinite(v) else 1e300


class _EvaluationsSpent(Exception):
    pass


def nelder_mead(f: Callable[[list[float]], float], x0: Sequence[float], bounds: Sequence[tuple[float, float]],
                maxfev: int, xatol: float, fatol: float) -> list[float]:
    """The point scipy.optimize.minimize(f, x0, method="Nelder-Mead", bounds=bounds, options={"maxfev": maxfev,
    "xatol": xatol, "fatol": fatol}) returns, step for step (same simplex, moves, clipping, ordering and stops;
    tests/unit/test_smoothing.py holds the two equal), on plain floats. Every vertex is clipped to the bounds, so the
    point is always inside them.

    Why not scipy's: on the three parameters of a damped-trend fit its per-iteration array handling and
    result objects cost almost as much as the likelihood, and model-1 fits damped trend 24 times a forecast
    (figures: bench/results/forecast-rules.md). Ties are ordered by numpy's argsort, as scipy's are: it is
    not a stable sort, so Python's sorted would break ties differently.
    """
    lo = [float(b[0]) for b in bounds]
    hi = [float(b[1]) for b in bounds]
    n = len(lo)

    def clip(x: list[float]) -> list[float]:
        return [min(max(v, lo[i]), hi[i]) for i, v in enumerate(x)]

    calls = 0

    def call(x: list[float]) -> float:
        nonlocal calls
        if calls >= maxfev:
            raise _EvaluationsSpent
        calls += 1
        return float(f(list(x)))

    start = clip([float(v) for v in x0])
    sim = [start]
    for k in range(n):
        x = list(start)
        x[k] = (1 + 0.05) * x[k] if x[k] != 0 else 0.00025
        sim.append(x)
    # a vertex pushed past an upper bound is reflected inside, then clipped (scipy's rule)
    sim = [clip([2.0 * hi[i] - v if v > hi[i] else v for i, v in enumerate(x)]) for x in sim]
    fsim = [math.inf] * (n + 1)
    try:
        for k in range(n + 1):
            fsim[k] = call(sim[k])
    except _EvaluationsSpent:
        pass

    def ranked() -> tuple[list[list[float]], list[float]]:
        # best first, by numpy's argsort as scipy's: it is not stable, so equal values keep its order, not Python's
        order = np.argsort(np.array(fsim, dtype=float)).tolist()
        return [sim[i] for i in order], [fsim[i] for i in order]

    sim, fsim = ranked()
    while calls < maxfev:
        try:
            if (max(abs(x[i] - sim[0][i]) for x in sim[1:] for i in range(n)) <= xatol
                    and max(abs(fsim[0] - v) for v in fsim[1:]) <= fatol):
                break
            xbar = [v / n for v in (sum(x[i] for x in sim[:-1]) for i in range(n))]
            worst = sim[-1]
            xr = clip([2.0 * b - w for b, w in zip(xbar, worst, strict=True)])
            fxr = call(xr)
            if fxr < fsim[0]:
                xe = clip([3.0 * b - 2.0 * w for b, w in zip(xbar, worst, strict=True)])
                fxe = call(xe)
                sim[-1], fsim[-1] = (xe, fxe) if fxe < fxr else (xr, fxr)
            elif fxr < fsim[-2]:
                sim[-1], fsim[-1] = xr, fxr
            else:
                if fxr < fsim[-1]:
                    xc = clip([1.5 * b - 0.5 * w for b, w in zip(xbar, worst, strict=True)])
                    fxc = call(xc)
                    shrink = not fxc <= fxr  # (scipy's test, so that a NaN shrinks too)
                    if not shrink:
                        sim[-1], fsim[-1] = xc, fxc
                else:
                    xcc = clip([0.5 * b + 0.5 * w for b, w in zip(xbar, worst, strict=True)])
                    fxcc = call(xcc)
                    shrink = not fxcc < fsim[-1]
                    if not shrink:
                        sim[-1], fsim[-1] = xcc, fxcc
                if shrink:
                    for j in range(1, n + 1):
                        sim[j] = clip([b + 0.5 * (v - b) for b, v in zip(sim[0], sim[j], strict=True)])
                        fsim[j] = call(sim[j])
        except _EvaluationsSpent:
            pass
        sim, fsim = ranked()
    return sim[0]


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
