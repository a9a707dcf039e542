"""The optimised Theta method's closed-form fit against the method's own recursion, written as a plain loop; the
damped-trend fit's Nelder-Mead and the one-parameter searches against scipy's, the filters against lfilter and the
damped-trend states against their numpy form, all to the bit; the seasonal adjustment shared by the pool's
members."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from app.compute.forecast.candidates import CANDIDATES, _adjustment
from app.compute.forecast.optimisers import bounded_minimum, nelder_mead
from app.compute.forecast.smoothing import (
    DAMPED_BOUNDS,
    OTM_STEPS,
    _damped_sse,
    _otm_fit,
    _ses_sse,
    _theta_line,
    damped_states,
    fit_optimised_theta,
    linear_filter,
    optimised_theta_forecast,
    ses_levels,
)


def _recursion(y: np.ndarray, l0: float, alpha: float, theta: float, h: int,
               steps: int = OTM_STEPS) -> tuple[float, np.ndarray]:
    """Fiorucci et al. (2016)'s state-space form, step by step: mu_t = l_{t-1} + (1 - 1/theta) ((1-a)^t A +
    (1 - (1-a)^(t+1)) / a B), l_t = a y_t + (1-a) l_{t-1}, with A, B the least-squares line through y; a
    forecast feeds mu back in place of y. Returns (mean over j < steps of the j-step in-sample MSE, forecast)."""
    n = len(y)
    t = np.arange(1, n + 1)
    b = 6 * (2 * np.mean(t * y) - (1 + n) * np.mean(y)) / (n * n - 1)
    a = np.mean(y) - (n + 1) * b / 2

    def mu(i: int, level: float) -> float:
        return level + (1 - 1 / theta) * (a * (1 - alpha) ** i + b * (1 - (1 - alpha) ** (i + 1)) / alpha)

    def ahead(i: int, level: float, k: int) -> list[float]:
        out = []
        for s in range(k):
            m = mu(i + s, level)
            out.append(m)
            level = alpha * m + (1 - alpha) * level
        return out

    levels = [alpha * y[0] + (1 - alpha) * l0]
    sq: list[list[float]] = [[] for _ in range(steps)]
    for i in range(1, n):
        for j, f in enumerate(ahead(i, levels[-1], steps)):
            if i + j < n:
                sq[j].append((y[i + j] - f) ** 2)
        levels.append(alpha * y[i] + (1 - alpha) * levels[-1])
    return float(np.mean([np.mean(s) for s in sq])), np.array(ahead(n, levels[-1], h))


def _series(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    if kind == "trend":
        return 10 + 0.3 * t + rng.normal(0, 1, n)
    if kind == "walk":
        return 50 + np.cumsum(rng.normal(0.1, 1, n))
    return 20 + 3 * np.sin(t / 7) + rng.normal(0, 0.5, n)  # a level that wanders, no trend


@pytest.mark.parametrize("kind", ["trend", "walk", "level"])
@pytest.mark.parametrize("n", [12, 40, 200])
def test_optimised_theta_is_the_recursions_best_fit(kind, n):
    y = _series(kind, n, seed=n)
    alpha, l0, c = fit_optimised_theta(y, _theta_line(y))
    theta = 1 / (1 - c) if c < 1 else 1e12
    loss, forecast = _recursion(y, l0, alpha, theta, 6)
    assert 0.1 <= alpha <= 0.99 and 0 <= c <= 1
    # the loss is the recursion's
    assert _otm_fit(y, alpha, OTM_STEPS, _theta_line(y))[2] == pytest.approx(loss, rel=1e-9)
    np.testing.assert_allclose(optimised_theta_forecast(y, 6), forecast, rtol=1e-6, atol=1e-6)
    # No parameter point the recursion can be given does better: simplex searches from several starts, over
    # (l0, alpha, theta) with theta >= 1, as statsforecast and forecTheta fit the method.
    for start in ([y[0] / 2, 0.5, 2.0], [y[0], 0.2, 1.5], [np.mean(y), 0.9, 5.0]):
        res = minimize(lambda p: _recursion(y, p[0], p[1], p[2], 1)[0], np.array(start), method="Nelder-Mead",
                       bounds=[(None, None), (0.1, 0.99), (1.0, 1e6)], options={"maxiter": 400})
        assert loss <= res.fun * (1 + 1e-3) + 1e-12


def test_optimised_theta_continues_a_line():
    y = 3.0 + 0.5 * np.arange(30, dtype=float)
    np.testing.assert_allclose(optimised_theta_forecast(y, 5), 3.0 + 0.5 * np.arange(30, 35), rtol=1e-6)


def test_optimised_theta_keeps_theta_at_least_one():
    # theta >= 1 is c = 1 - 1/theta in [0, 1]. A series that rose for 10 points and fell for 30: its
    # least-squares line is almost flat, and its in-sample forecasts would be best served by c = 6 (theta
    # < 0: a fall many times the line's rise, extrapolated); the method stops at the whole line, c = 1.
    y = np.r_[np.linspace(5, 25, 10), np.linspace(25, 15, 30)]
    alpha, l0, c = fit_optimised_theta(y, _theta_line(y))
    assert c == 1.0
    forecast = optimised_theta_forecast(y, 8)
    assert np.all(np.isfinite(forecast)) and np.all(np.abs(np.diff(forecast)) < 1.0)


def _scipy_nelder_mead(f, x0, bounds, maxfev, xatol, fatol) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a start outside the bounds is warned about, then clipped
        return minimize(f, np.asarray(x0, dtype=float), method="Nelder-Mead", bounds=bounds,
                        options={"maxfev": maxfev, "xatol": xatol, "fatol": fatol}).x


@pytest.mark.parametrize("kind", ["trend", "walk", "level"])
@pytest.mark.parametrize("seed", range(12))
def test_nelder_mead_is_scipys_on_the_damped_trend_fit(kind, seed):
    # exactly the point scipy returns, so the forecasts are the ones measured with scipy's
    n = [6, 15, 40, 120, 400, 1000][seed % 6]
    y = _series(kind, n, seed) / 20
    x0 = np.array([y[0], float(np.polyfit(np.arange(min(n, 10), dtype=float), y[:10], 1)[0])])
    ours = nelder_mead(lambda p: _damped_sse(p, y, x0), [0.3, 0.1, 0.95], DAMPED_BOUNDS, 90, 1e-2, 1e-6)
    theirs = _scipy_nelder_mead(lambda p: _damped_sse(p, y, x0), [0.3, 0.1, 0.95], DAMPED_BOUNDS, 90, 1e-2, 1e-6)
    assert np.array_equal(np.array(ours), theirs)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("maxfev, xatol, fatol", [(90, 1e-2, 1e-6), (300, 1e-6, 1e-10), (7, 1e-2, 1e-6)])
@pytest.mark.parametrize("steps", [0.0, 0.5])
def test_nelder_mead_is_scipys_on_any_function(seed, maxfev, xatol, fatol, steps):
    # a rippled bowl whose minimum may lie outside the box, a start that may too, a budget that may run out
    # mid-iteration: every branch (reflect, expand, both contractions, shrink, clipping, the evaluation cap);
    # rounded to steps of 0.5, ties, where the order of equal vertices and each strict or loose comparison show
    rng = np.random.default_rng(seed)
    centre, weight = rng.uniform(-1, 2, 3), rng.uniform(0.1, 10, 3)

    def f(p):
        p = np.asarray(p, dtype=float)
        v = float(np.sum(weight * (p - centre) ** 2) + 0.1 * np.sin(5 * p[0]))
        return round(v / steps) * steps if steps else v

    bounds = [(-0.5, 1.0), (0.0, 1.5), (0.2, 0.9)]
    x0 = rng.uniform(-0.2, 1.0, 3)
    ours = nelder_mead(f, x0, bounds, maxfev, xatol, fatol)
    assert np.array_equal(np.array(ours), _scipy_nelder_mead(f, x0, bounds, maxfev, xatol, fatol))


def test_seasonal_adjustment_is_shared_only_by_the_same_history():
    _adjustment.cache_clear()
    t = np.arange(120, dtype=float)
    y = 10 + 0.05 * t + 2 * np.sin(2 * np.pi * t / 12) + np.random.default_rng(0).normal(0, 0.2, 120)
    first = CANDIDATES["ses_sa"](y, 12, (12,))
    CANDIDATES["theta_sa"](y.copy(), 12, (12,))  # same values in another array: the adjustment is reused
    assert _adjustment.cache_info().hits == 1
    assert np.array_equal(CANDIDATES["ses_sa"](y, 12, (12,)), first)
    other = y.copy()
    other[-1] += 1.0  # one value differs: its own adjustment, not the cached one
    _adjustment.cache_clear()
    expected = CANDIDATES["ses_sa"](other, 12, (12,))
    _adjustment.cache_clear()
    CANDIDATES["ses_sa"](y, 12, (12,))
    assert np.array_equal(CANDIDATES["ses_sa"](other, 12, (12,)), expected)
    assert _adjustment.cache_info().misses == 2
    indices, _ = _adjustment(12, y.tobytes())
    with pytest.raises(ValueError):
        indices[0] = 0.0  # shared between members, so read-only


@pytest.mark.parametrize("alpha", [0.001, 0.2, 0.5, 0.999])
@pytest.mark.parametrize("l0", [-3.7, 0.0, 1e-9, 12.5])
def test_ses_levels_start_where_scipys_lfiltic_starts_them(alpha, l0):
    # the initial state is written out instead of calling lfiltic: the levels must not move by one bit
    from scipy.signal import lfilter, lfiltic

    y = _series("walk", 30, 3)
    expected, _ = lfilter([alpha], [1.0, alpha - 1.0], y, zi=lfiltic([alpha], [1.0, alpha - 1.0], [l0]))
    assert np.array_equal(ses_levels(y, alpha, l0), expected)


@pytest.mark.parametrize("seed", range(30))
def test_linear_filter_is_lfilter(seed):
    # lfilter's own kernel, called without lfilter's wrapper: the same numbers, lists or arrays, with and without
    # an initial state, down a 2-D array's columns as _joint_ses filters them
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    y = rng.standard_normal(int(rng.integers(2, 400))) * 10.0 ** rng.uniform(-6, 6)
    alpha = float(rng.uniform(0.001, 0.999))
    b, a = [float(v) for v in rng.standard_normal(2)], [1.0, float(rng.uniform(-1.9, 1.9)), float(rng.uniform(-.9, .9))]
    zi = [float(v) for v in rng.standard_normal(2)]
    assert np.array_equal(linear_filter([alpha], [1.0, alpha - 1.0], y), lfilter([alpha], [1.0, alpha - 1.0], y))
    for ours, theirs in ((linear_filter(b, a, y, zi=zi), lfilter(b, a, y, zi=zi)),
                         (linear_filter(np.array(b), np.array(a), y, zi=np.array(zi)), lfilter(b, a, y, zi=zi))):
        assert all(np.array_equal(o, t) for o, t in zip(ours, theirs, strict=True))
    w = rng.standard_normal((int(rng.integers(2, 20)), 12))
    ours = linear_filter([alpha], [1.0, alpha - 1.0], w, zi=(1.0 - alpha) * w[:1], axis=0)
    theirs = lfilter([alpha], [1.0, alpha - 1.0], w, axis=0, zi=(1.0 - alpha) * w[:1])
    assert all(np.array_equal(o, t) for o, t in zip(ours, theirs, strict=True))


def _numpy_damped_states(y, alpha, beta, phi, x0):
    """damped_states as it was written on numpy arrays and scalars, with scipy's lfilter."""
    from scipy.signal import lfilter

    d = np.array([[1.0 - alpha, phi * (1.0 - alpha)], [-beta, phi * (1.0 - beta)]])
    g = np.array([alpha, beta])
    tr = d[0, 0] + d[1, 1]
    det = d[0, 0] * d[1, 1] - d[0, 1] * d[1, 0]
    den = np.array([1.0, -tr, det])
    num_l = np.array([g[0], d[0, 1] * g[1] - d[1, 1] * g[0]])
    num_b = np.array([g[1], d[1, 0] * g[0] - d[0, 0] * g[1]])
    x1 = d @ x0
    x2 = d @ x1
    lev, _ = lfilter(num_l, den, y, zi=np.array([x1[0], x2[0] + den[1] * x1[0]]))
    tre, _ = lfilter(num_b, den, y, zi=np.array([x1[1], x2[1] + den[1] * x1[1]]))
    return lev, tre


@pytest.mark.parametrize("seed", range(30))
def test_damped_states_and_errors_on_plain_floats_are_numpys(seed):
    rng = np.random.default_rng(seed)
    y = _series(["trend", "walk", "level"][seed % 3], int(rng.integers(4, 300)), seed) / 20
    x0 = np.array([y[0], float(rng.normal(0, 0.1))])
    for _ in range(20):
        alpha, beta_frac, phi = (float(rng.uniform(lo, hi)) for lo, hi in DAMPED_BOUNDS)
        ours, theirs = damped_states(y, alpha, alpha * beta_frac, phi, x0), \
            _numpy_damped_states(y, alpha, alpha * beta_frac, phi, x0)
        assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
        pred = np.empty_like(y)
        pred[0] = x0[0] + phi * x0[1]
        pred[1:] = theirs[0][:-1] + phi * theirs[1][:-1]
        assert _damped_sse([alpha, beta_frac, phi], y, x0) == float((y - pred) @ (y - pred))


def _scipy_bounded(f, low, high, xatol, maxiter=500):
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(f, bounds=(low, high), method="bounded", options={"xatol": xatol, "maxiter": maxiter})
    return res.x, res.fun


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("steps", [0.0, 0.01])
def test_bounded_minimum_is_scipys_on_any_function(seed, steps):
    # rippled, lopsided or flat curves whose minimum may sit on a bound, rounded to steps where ties decide:
    # golden and parabolic steps, each comparison, the iteration cap
    rng = np.random.default_rng(seed)
    centre, ripple, power = rng.uniform(-0.5, 1.5), rng.uniform(0, 0.3), rng.choice([1.0, 2.0, 4.0])
    flat = seed % 10 == 0

    def f(a):
        v = 0.0 if flat else float(abs(a - centre) ** power + ripple * np.sin(17 * a))
        return round(v / steps) * steps if steps else v

    low, high = sorted(rng.uniform(-1, 2, 2))
    xatol, maxiter = [(1e-3, 500), (1e-5, 500), (1e-3, 4)][seed % 3]
    x, fun = bounded_minimum(f, float(low), float(high), xatol, maxiter)
    theirs = _scipy_bounded(f, float(low), float(high), xatol, maxiter)
    assert (x, fun) == (float(theirs[0]), float(theirs[1]))


@pytest.mark.parametrize("beyond", [-0.3, -0.01, 1.01, 1.3])
@pytest.mark.parametrize("power", [1.5, 2.0, 3.0])
def test_bounded_minimum_is_scipys_where_the_minimum_lies_past_a_bound(beyond, power):
    # smooth curves falling towards a bound: parabolic steps that land within the tolerance of either bound
    def f(a):
        return abs(a - beyond) ** power

    theirs = _scipy_bounded(f, 0.0, 1.0, 1e-3)
    assert bounded_minimum(f, 0.0, 1.0, 1e-3) == (float(theirs[0]), float(theirs[1]))


@pytest.mark.parametrize("kind", ["trend", "walk", "level"])
@pytest.mark.parametrize("n", [4, 12, 60, 300])
def test_bounded_minimum_is_scipys_on_the_smoothing_losses(kind, n):
    # SES's one-step loss and the optimised Theta method's, as fit_ses and fit_optimised_theta search them
    y = _series(kind, n, seed=n) / 20
    line = _theta_line(y)
    for loss, low, high in ((lambda a: _ses_sse(a, y), 0.001, 0.999),
                            (lambda a: _otm_fit(y, a, OTM_STEPS, line)[2], 0.1, 0.3),
                            (lambda a: _otm_fit(y, a, OTM_STEPS, line)[2], 0.89, 0.99)):
        theirs = _scipy_bounded(loss, low, high, 1e-3)
        assert bounded_minimum(loss, low, high, 1e-3) == (float(theirs[0]), float(theirs[1]))
