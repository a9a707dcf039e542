"""The optimised Theta method's closed-form fit against the method's own recursion, written as a plain loop."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from app.forecast.smoothing import OTM_STEPS, _otm_fit, _theta_line, fit_optimised_theta, optimised_theta_forecast


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
