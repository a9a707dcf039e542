"""Forecasts with covariates: a regression on the design columns whose residual series the chosen model forecasts.

Method (docs/models.md, "Covariates"):

1. Design. Columns known over the horizon enter as they are; a past-only column enters lagged by the horizon
   (row i sees the column's value at i - horizon), so its values over the horizon are the last ``horizon`` rows
   of its history. The first ``horizon`` rows of a lagged column have no value: they are left out of the fit and
   carry the column's first value in the residual series. Columns constant over the fitted rows are dropped
   (their effect cannot be told from the level).
2. Coefficients. Estimated on the series and the columns differenced at the shortest usable season (else at
   lag 1), with an unpenalised intercept (the drift): a covariate that shares the series' trend or season then
   does not take it over, only its movements beyond them count. The fit is a Huber M-estimate (iteratively
   reweighted least squares) with a light ridge penalty on standardised columns; a column whose coefficient is
   not significant (two-sided 5%) is dropped and the rest refitted.
3. Forecast. The model forecasts the residual series y - (X - mean X)·beta (centred, so the residual series
   keeps the series' level and sign); the covariate forecast is the residual forecast, its median and bounds,
   plus (X_future - mean X)·beta. The intervals are the residual model's rolling-origin intervals (the future
   columns taken as known), widened by the coefficients' uncertainty over the future columns' move from their
   recent values.
4. Holdout. The same steps refit on the history without its last ``horizon`` points forecast those points beside
   the univariate forecast from the same origin, and so on for the windows before (HOLDOUT_WINDOWS in all, fewer
   on a short history); unless the covariate forecast has the strictly lower mean absolute error over them, the
   univariate forecast answers, with a note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from app.compute.forecast.base import never_negative, usable_periods
from app.compute.forecast.results import CovariateMatrix, ForecastResult
from app.compute.pool import WorkFailed

# the univariate path of app.compute.forecast.models: (model_id, values, horizon, confidences, periods)
Univariate = Callable[[str, np.ndarray, int, Sequence[float], tuple[int, ...]], list[ForecastResult]]

# a fit, or the model and its fallback on the residual series, failing: the univariate forecast answers instead
_FIT_FAILURES = (ValueError, ArithmeticError, np.linalg.LinAlgError, WorkFailed)
# the newest rows the coefficients rest on: the largest history a model reads, so a long request costs no more
FIT_ROWS = 3000
# Huber's tuning constant: 95% efficiency when the errors are Gaussian, bounded influence when they are not
HUBER_C = 1.345
HUBER_ITERATIONS = 30  # IRLS converges in a handful of steps; this only bounds a non-converging case
# ridge penalty in units of one observation's information on a standardised column: it keeps collinear columns
# (one-hot levels, a holiday and its neighbourhood) estimable and leaves well-determined effects as they are
RIDGE = 1.0
# residual degrees of freedom a fit needs beyond its coefficients, so the robust scale rests on more than a few
MIN_RESIDUAL_DOF = 10
# a column whose spread over the fitted rows is below this fraction of its magnitude is constant there
CONSTANT_TOLERANCE = 1e-9
# two-sided 5% test on each coefficient: the usual level at which an effect counts as told from zero
SIGNIFICANCE_Z = 1.96
# holdout windows the covariates must win on together: one short window decides by chance, each more costs two
# refits (with and without the covariates)
HOLDOUT_WINDOWS = 3


class Design:
    """The design columns aligned with a history and its horizon, past-only columns lagged by the horizon."""

    def __init__(self, covariates: CovariateMatrix, n: int, horizon: int) -> None:
        hist = np.asarray(covariates.history, dtype=float)
        fut = np.asarray(covariates.future, dtype=float)
        k = len(covariates.names)
        if hist.shape != (n, k) or fut.shape != (horizon, k) or len(covariates.past_only) != k:
            raise ValueError("covariates do not match the history and the horizon")
        past_only = np.asarray(covariates.past_only, dtype=bool)
        if not np.all(np.isfinite(hist)) or not np.all(np.isfinite(fut[:, ~past_only])):
            raise ValueError("covariates must be finite")
        history, future = hist.copy(), fut.copy()
        valid = np.ones(n, dtype=bool)
        if past_only.any():
            lagged = hist[:, past_only]
            shifted = np.empty_like(lagged)
            shifted[horizon:] = lagged[:n - horizon] if n > horizon else lagged[:0]
            shifted[:horizon] = lagged[0]
            history[:, past_only] = shifted
            future[:, past_only] = lagged[n - horizon:] if n >= horizon else lagged[0]
            valid[:horizon] = False
        self.history = history
        self.future = future
        self.valid = valid  # rows with every column defined: the rows the coefficients are fitted on


@dataclass(frozen=True)
class Coefficients:
    """The fitted effects of the design columns (zero for a column dropped or not significant) and their
    covariance."""

    beta: np.ndarray  # (k,)
    covariance: np.ndarray  # (k, k)


def _huber_ridge(x: np.ndarray, y: np.ndarray, overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """Slopes of y on x (with an unpenalised intercept, not returned) and their covariance: Huber M-estimate with a
    ridge penalty on the (standardised) slopes. The covariance is the sandwich with Newey-West (Bartlett) weights
    over ``overlap`` lags: differences over a lag of L points overlap, so their errors are correlated up to L
    apart and the plain formula would count every row as independent (see the end)."""
    m, k = x.shape
    design = np.column_stack([np.ones(m), x])
    penalty = np.diag(np.r_[0.0, np.full(k, RIDGE)])
    weights = np.ones(m)
    coef = np.zeros(k + 1)
    resid = y.copy()
    scale = 0.0
    for _ in range(HUBER_ITERATIONS):
        wd = design * weights[:, None]
        new = np.linalg.solve(design.T @ wd + penalty, wd.T @ y)
        resid = y - design @ new
        # MAD scale of the residuals, Gaussian-consistent
        scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
        converged = np.allclose(new, coef, rtol=1e-8, atol=1e-10)
        coef = new
        if scale <= 0:
            break
        u = np.abs(resid) / (HUBER_C * scale)
        weights = np.where(u <= 1.0, 1.0, 1.0 / np.maximum(u, 1.0))
        if converged:
            break
    bread = np.linalg.inv(design.T @ (design * weights[:, None]) + penalty)
    scores = design * (weights * resid)[:, None]  # Huber's psi of each residual times its row
    # Bartlett-weighted sum of the scores' cross-products up to ``overlap`` lags, computed as the cross-products of
    # the sums over every run of overlap + 1 consecutive rows (zero-padded at both ends), which it equals exactly
    span = overlap + 1
    padded = np.vstack([np.zeros((span, k + 1)), scores, np.zeros((span, k + 1))])
    cumulative = np.cumsum(padded, axis=0)
    runs = cumulative[span:] - cumulative[:-span]
    meat = runs.T @ runs / span
    sandwich = (bread @ meat @ bread)[1:, 1:]
    plain = (scale ** 2 * bread)[1:, 1:]
    # the sandwich allows for the overlap but is itself biased low on short samples, the plain formula ignores
    # the overlap: the larger of the two is the cautious choice
    return coef[1:], sandwich if np.trace(sandwich) >= np.trace(plain) else plain


def coefficients(y: np.ndarray, design: Design, periods: tuple[int, ...]) -> Coefficients | None:
    """The effects of the design columns (all zero when none varies beyond the series' season or none is
    significant), or None if the history has too few rows for a fit."""
    n, k = design.history.shape
    per = usable_periods(periods, n)
    lag = per[0] if per else 1
    rows = np.flatnonzero(design.valid)
    rows = rows[rows >= lag]
    rows = rows[design.valid[rows - lag]][-FIT_ROWS:]
    dy = y[rows] - y[rows - lag]
    dx = design.history[rows] - design.history[rows - lag]
    spread = dx.std(axis=0) if len(rows) else np.zeros(k)
    magnitude = np.max(np.abs(design.history), axis=0) if n else np.zeros(k)
    kept = spread > CONSTANT_TOLERANCE * np.maximum(magnitude, 1.0)
    if len(rows) < int(kept.sum()) + 1 + MIN_RESIDUAL_DOF:
        return None
    beta, covariance = np.zeros(k), np.zeros((k, k))
    if not kept.any():
        return Coefficients(beta, covariance)
    z = (dx - dx.mean(axis=0)) / np.where(kept, spread, 1.0)
    slopes, cov = _huber_ridge(z[:, kept], dy, lag)
    # a column whose effect cannot be told from zero would only add its noise to the forecast: refit without it
    significant = np.abs(slopes) >= SIGNIFICANCE_Z * np.sqrt(np.diag(cov))
    if not significant.all():
        kept[np.flatnonzero(kept)[~significant]] = False
        if kept.any():
            slopes, cov = _huber_ridge(z[:, kept], dy, lag)
    if kept.any():
        beta[kept] = slopes / spread[kept]
        covariance[np.ix_(kept, kept)] = cov / np.outer(spread[kept], spread[kept])
    return Coefficients(beta, covariance)


def _covariate_forecast(model_id: str, y: np.ndarray, horizon: int, confidences: Sequence[float],
                        periods: tuple[int, ...], design: Design,
                        univariate: Univariate) -> list[ForecastResult] | None:
    fit = coefficients(y, design, periods)
    return None if fit is None else _forecast(model_id, y, horizon, confidences, periods, design, fit, univariate)


def _forecast(model_id: str, y: np.ndarray, horizon: int, confidences: Sequence[float], periods: tuple[int, ...],
              design: Design, fit: Coefficients, univariate: Univariate) -> list[ForecastResult]:
    """The residual series' forecast plus the covariates' effect, its interval widened by the effect's
    uncertainty."""
    centre = design.history.mean(axis=0)
    residual = y - (design.history - centre) @ fit.beta
    effect = (design.future - centre) @ fit.beta
    # the residual model follows the residual series' recent level, so an error in beta shows in the forecast
    # as far as the future columns move from their recent values (those of the last cycle, or the last row)
    per = usable_periods(periods, len(y))
    recent = design.history[-(per[0] if per else 1):].mean(axis=0)
    moved = design.future - recent
    effect_sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", moved, fit.covariance, moved), 0.0))
    floor = 0.0 if never_negative(y) else -np.inf
    out = []
    for c, res in zip(confidences, univariate(model_id, residual, horizon, confidences, periods), strict=True):
        med = np.asarray(res.median) + effect
        # the coefficients' uncertainty added to the residual model's, as independent errors
        extra = (float(norm.ppf(0.5 + c / 2)) * effect_sd) ** 2
        down = np.sqrt((np.asarray(res.median) - np.asarray(res.lower)) ** 2 + extra)
        up = np.sqrt((np.asarray(res.upper) - np.asarray(res.median)) ** 2 + extra)
        med, lo, hi = (np.maximum(a, floor) for a in (med, med - down, med + up))
        out.append(ForecastResult([float(v) for v in med], [float(v) for v in lo], [float(v) for v in hi],
                                  res.fallback, covariates_used=True))
    return out


def _unused(results: list[ForecastResult], note: str) -> list[ForecastResult]:
    return [ForecastResult(r.median, r.lower, r.upper, r.fallback, covariates_used=False, covariates_note=note)
            for r in results]


def _holdout_errors(model_id: str, y: np.ndarray, horizon: int, periods: tuple[int, ...],
                    covariates: CovariateMatrix, univariate: Univariate) -> tuple[float, float] | None:
    """Mean absolute errors (with the covariates, without) over the last HOLDOUT_WINDOWS non-overlapping windows
    of ``horizon`` points of the history, each forecast from the history before it (fewer windows when the history
    is short); None when not even the last window can be checked."""
    hist = np.asarray(covariates.history, dtype=float)
    errors: list[tuple[float, float]] = []
    for j in range(1, HOLDOUT_WINDOWS + 1):
        cut = len(y) - j * horizon
        if cut < 1:
            break
        train = CovariateMatrix(covariates.names, hist[:cut], hist[cut:cut + horizon], covariates.past_only)
        try:
            held = _covariate_forecast(model_id, y[:cut], horizon, [0.5], periods, Design(train, cut, horizon),
                                       univariate)
            plain = univariate(model_id, y[:cut], horizon, [0.5], periods)[0] if held is not None else None
        except _FIT_FAILURES:
            held = plain = None
        if held is None or plain is None:
            break
        actual = y[cut:cut + horizon]
        errors.append((_mae(held[0].median, actual), _mae(plain.median, actual)))
    if not errors:
        return None
    with_cov, without = np.mean(np.asarray(errors), axis=0)
    return float(with_cov), float(without)


def _mae(forecast: list[float], actual: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(forecast) - actual)))


def forecast_with_covariates(model_id: str, y: np.ndarray, horizon: int, confidences: Sequence[float],
                             periods: tuple[int, ...], covariates: CovariateMatrix,
                             univariate: Univariate) -> list[ForecastResult]:
    """The covariate forecast if it beat the univariate one on holdout windows at the end of the history, else the
    univariate forecast with covariates_used=False and the reason."""
    design = Design(covariates, len(y), horizon)
    fit = coefficients(y, design, periods) if covariates.names else None
    if fit is None:
        note = "the history is too short to fit the covariates" if covariates.names else "no covariate was given"
    elif not fit.beta.any():
        note = "no covariate had an effect beyond the series' own trend and season that could be told from zero"
    else:
        checked = _holdout_errors(model_id, y, horizon, periods, covariates, univariate)
        if checked is None:
            note = "the history is too short to check the covariates on a holdout"
        elif not checked[0] < checked[1]:
            note = "on holdout windows at the end of the history the covariates did not make the forecast more accurate"
        else:
            try:
                return _forecast(model_id, y, horizon, confidences, periods, design, fit, univariate)
            except _FIT_FAILURES as exc:
                note = f"the forecast of the series less the covariates' effect failed ({type(exc).__name__})"
    return _unused(univariate(model_id, y, horizon, confidences, periods), note)
