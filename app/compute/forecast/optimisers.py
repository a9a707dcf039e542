"""The parameter searches the smoothing fits run, as scipy runs them, on plain floats.

bounded_minimum is scipy.optimize.minimize_scalar's bounded Brent search and nelder_mead is scipy.optimize.minimize's
Nelder-Mead with bounds, each step for step (tests/unit/compute/forecast/test_smoothing.py holds them equal to
scipy's), because scipy's per-step array handling costs more than the small losses they search. numpy is used only to
order ties as scipy does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

_SQRT_EPS = math.sqrt(2.2e-16)
_GOLDEN = 0.5 * (3.0 - math.sqrt(5.0))


def _sign_or_one(v: float) -> float:
    """numpy's sign(v) + (v == 0): the direction of a step, 1 for none."""
    return 1.0 if v > 0 or v == 0 else -1.0 if v < 0 else math.nan


def _maximum(u: float, v: float) -> float:
    """numpy's maximum of two floats: a NaN wins."""
    if u != u or v != v:
        return math.nan
    return u if u >= v else v


def bounded_minimum(f: Callable[[float], float], low: float, high: float, xatol: float,
                    maxiter: int = 500) -> tuple[float, float]:
    """(x, f(x)) as scipy.optimize.minimize_scalar(f, bounds=(low, high), method="bounded", options={"xatol":
    xatol, "maxiter": maxiter}) returns them (res.x, res.fun), step for step (Brent's method: the same golden and
    parabolic steps, tests and stops; tests/unit/compute/forecast/test_smoothing.py holds the two equal), on plain
    floats.

    Why not scipy's: its per-step numpy calls on scalars cost more than the one-parameter losses it searches
    (SES's, the optimised Theta method's, seasonal-position SES's), and model-1 runs some 60 such searches a
    forecast."""
    a, b = low, high
    fulc = a + _GOLDEN * (b - a)
    nfc = xf = fulc
    rat = e = 0.0
    fx = f(xf)
    num = 1
    ffulc = fnfc = fx
    xm = 0.5 * (a + b)
    tol1 = _SQRT_EPS * abs(xf) + xatol / 3.0
    tol2 = 2.0 * tol1
    while abs(xf - xm) > (tol2 - 0.5 * (b - a)):
        golden = True
        if abs(e) > tol1:  # a parabola through the three best points, if it steps inside and shrinks
            golden = False
            r = (xf - nfc) * (fx - ffulc)
            q = (xf - fulc) * (fx - fnfc)
            p = (xf - fulc) * q - (xf - nfc) * r
            q = 2.0 * (q - r)
            if q > 0.0:
                p = -p
            q = abs(q)
            r = e
            e = rat
            if abs(p) < abs(0.5 * q * r) and p > q * (a - xf) and p < q * (b - xf):
                rat = (p + 0.0) / q
                x = xf + rat
                if (x - a) < tol2 or (b - x) < tol2:
                    rat = tol1 * _sign_or_one(xm - xf)
            else:
                golden = True
        if golden:
            e = a - xf if xf >= xm else b - xf
            rat = _GOLDEN * e
        x = xf + _sign_or_one(rat) * _maximum(abs(rat), tol1)
        fu = f(x)
        num += 1
        if fu <= fx:
            if x >= xf:
                a = xf
            else:
                b = xf
            fulc, ffulc = nfc, fnfc
            nfc, fnfc = xf, fx
            xf, fx = x, fu
        else:
            if x < xf:
                a = x
            else:
                b = x
            if fu <= fnfc or nfc == xf:
                fulc, ffulc = nfc, fnfc
                nfc, fnfc = x, fu
            elif fu <= ffulc or fulc == xf or fulc == nfc:
                fulc, ffulc = x, fu
        xm = 0.5 * (a + b)
        tol1 = _SQRT_EPS * abs(xf) + xatol / 3.0
        tol2 = 2.0 * tol1
        if num >= maxiter:
            break
    return xf, fx


class _EvaluationsSpent(Exception):
    pass


def nelder_mead(f: Callable[[list[float]], float], x0: Sequence[float], bounds: Sequence[tuple[float, float]],
                maxfev: int, xatol: float, fatol: float) -> list[float]:
    """The point scipy.optimize.minimize(f, x0, method="Nelder-Mead", bounds=bounds, options={"maxfev": maxfev,
    "xatol": xatol, "fatol": fatol}) returns, step for step (same simplex, moves, clipping, ordering and stops;
    tests/unit/compute/forecast/test_smoothing.py holds the two equal), on plain floats. Every vertex is clipped to
    the bounds, so the point is always inside them.

    Why not scipy's: on the three parameters of a damped-trend fit its per-iteration array handling and
    result objects cost almost as much as the likelihood, and model-1 fits damped trend up to 24 times a forecast
    (figures: bench/results/forecast-rules.md). Ties are ordered by numpy's argsort, as scipy's are: it is
    not a stable sort, so Python's sorted would break ties differently.
    """
    lo = [float(b[0]) for b in bounds]
    hi = [float(b[1]) for b in bounds]
    n = len(lo)

    def clip(x: list[float]) -> list[float]:
        return [min(max(v, low), high) for v, low, high in zip(x, lo, hi, strict=True)]

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
        # best first, by numpy's argsort as scipy's: it is not stable, so equal values keep its order, not Python's.
        # Distinct numbers (no NaN, no two equal) have one order, which Python's sort finds without numpy's calls.
        if len(set(fsim)) == len(fsim) and all(v == v for v in fsim):
            order = sorted(range(len(fsim)), key=fsim.__getitem__)
        else:
            order = np.argsort(np.array(fsim, dtype=float)).tolist()
        return [sim[i] for i in order], [fsim[i] for i in order]

    sim, fsim = ranked()
    while calls < maxfev:
        try:
            best = sim[0]
            if (max([abs(v - b) for x in sim[1:] for v, b in zip(x, best, strict=True)]) <= xatol
                    and max([abs(fsim[0] - v) for v in fsim[1:]]) <= fatol):
                break
            xbar = [sum(coordinate) / n for coordinate in zip(*sim[:-1], strict=True)]
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
