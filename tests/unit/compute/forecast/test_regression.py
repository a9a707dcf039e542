"""Forecasts with covariates (app.compute.forecast.regression): a driver that explains the series is used and helps,
one that carries nothing or only repeats the trend is not, past-only columns enter lagged by the horizon, and a call
without covariates is the univariate forecast itself."""

from __future__ import annotations

import numpy as np
import pytest

from app.compute.forecast.models import run_forecast, run_forecast_multi
from app.compute.forecast.regression import Design, coefficients
from app.compute.forecast.work import CovariateMatrix, ForecastWork, LevelsWork

H = 14
PERIODS = (7,)


def _weekly(n: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(n)
    return 100 + 0.05 * t + 10 * np.sin(2 * np.pi * t / 7) + rng.normal(scale=1.0, size=n)


def _matrix(columns: dict[str, np.ndarray], n: int, past_only: tuple[bool, ...] | None = None) -> CovariateMatrix:
    names = tuple(columns)
    full = np.column_stack([columns[c] for c in names])
    flags = past_only or (False,) * len(names)
    future = full[n:].copy()
    future[:, np.asarray(flags, dtype=bool)] = np.nan
    return CovariateMatrix(names, full[:n], future, flags)


def _mae(forecast: list[float], actual: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(forecast) - actual)))


def test_a_known_driver_is_used_and_improves_the_forecast() -> None:
    rng = np.random.default_rng(1)
    n = 300
    price = rng.normal(size=n + H)
    y = _weekly(n + H, rng) - 6 * price
    cm = _matrix({"price": price}, n)
    with_cov = run_forecast("forecast-model-1", y[:n], H, 0.95, PERIODS, covariates=cm)
    plain = run_forecast("forecast-model-1", y[:n], H, 0.95, PERIODS)
    assert with_cov.covariates_used is True and with_cov.covariates_note is None
    assert plain.covariates_used is None and plain.covariates_note is None
    assert _mae(with_cov.median, y[n:]) < 0.5 * _mae(plain.median, y[n:])
    lo, hi = np.asarray(with_cov.lower), np.asarray(with_cov.upper)
    assert np.all(lo <= with_cov.median) and np.all(np.asarray(with_cov.median) <= hi)
    assert np.mean((y[n:] >= lo) & (y[n:] <= hi)) >= 0.8


def test_the_coefficients_are_recovered_despite_gross_outliers() -> None:
    rng = np.random.default_rng(2)
    n = 400
    x = rng.normal(size=(n + H, 2))
    y = _weekly(n + H, rng) + 3 * x[:, 0] - 2 * x[:, 1]
    y[rng.choice(n, 12, replace=False)] += 200  # a few gross errors in the history
    design = Design(_matrix({"a": x[:, 0], "b": x[:, 1]}, n), n, H)
    fit = coefficients(y[:n], design, PERIODS)
    assert fit is not None
    np.testing.assert_allclose(fit.beta, [3.0, -2.0], atol=0.3)


def test_a_covariate_that_only_repeats_the_trend_and_season_does_not_take_them_over() -> None:
    rng = np.random.default_rng(3)
    n = 280
    t = np.arange(n + H, dtype=float)
    y = _weekly(n + H, rng)
    # the trend itself and a column with the series' weekly shape: nothing beyond them to explain
    cm = _matrix({"trend": t, "weekday_shape": np.sin(2 * np.pi * t / 7)}, n)
    design = Design(cm, n, H)
    # differenced at the season, both columns are constant: dropped, they explain nothing
    fit = coefficients(y[:n], design, PERIODS)
    assert fit is not None and not fit.beta.any()
    res = run_forecast("forecast-model-2", y[:n], H, 0.9, PERIODS, covariates=cm)
    plain = run_forecast("forecast-model-2", y[:n], H, 0.9, PERIODS)
    assert res.covariates_used is False and "trend and season" in (res.covariates_note or "")
    assert (res.median, res.lower, res.upper) == (plain.median, plain.lower, plain.upper)


def test_noise_covariates_leave_the_forecast_close_to_the_univariate_one() -> None:
    rng = np.random.default_rng(4)
    n = 300
    y = _weekly(n + H, rng)
    cm = _matrix({f"noise{i}": rng.normal(size=n + H) for i in range(3)}, n)
    res = run_forecast("forecast-model-1", y[:n], H, 0.95, PERIODS, covariates=cm)
    plain = run_forecast("forecast-model-1", y[:n], H, 0.95, PERIODS)
    assert res.covariates_used in (True, False)
    gap = np.max(np.abs(np.asarray(res.median) - np.asarray(plain.median)))
    assert gap < 0.5  # well inside the noise (sd 1) of the series: the fitted effects are near zero


def test_a_past_only_driver_enters_lagged_by_the_horizon() -> None:
    rng = np.random.default_rng(5)
    n = 300
    lead = rng.normal(size=n + H)
    y = _weekly(n + H, rng)
    y[H:] += 8 * lead[:-H]  # the series follows the driver H steps later: known over the horizon from the past
    cm = _matrix({"lead": lead}, n, past_only=(True,))
    assert np.all(np.isnan(cm.future))
    design = Design(cm, n, H)
    np.testing.assert_array_equal(design.future[:, 0], lead[n - H:n])
    assert not design.valid[:H].any() and design.valid[H:].all()
    res = run_forecast("forecast-model-1", y[:n], H, 0.95, PERIODS, covariates=cm)
    plain = run_forecast("forecast-model-1", y[:n], H, 0.95, PERIODS)
    assert res.covariates_used is True
    assert _mae(res.median, y[n:]) < 0.5 * _mae(plain.median, y[n:])


def test_constant_columns_are_dropped_and_the_driver_still_counts() -> None:
    rng = np.random.default_rng(6)
    n = 300
    promo = (rng.random(n + H) < 0.2).astype(float)
    y = _weekly(n + H, rng) + 15 * promo
    cm = _matrix({"promo": promo, "always_one": np.ones(n + H)}, n)
    fit = coefficients(y[:n], Design(cm, n, H), PERIODS)
    assert fit is not None and fit.beta[1] == 0.0 and abs(fit.beta[0] - 15) < 1.0
    assert run_forecast("forecast-model-3", y[:n], H, 0.9, PERIODS, covariates=cm).covariates_used is True


def test_a_count_series_stays_non_negative_with_covariates() -> None:
    rng = np.random.default_rng(7)
    n = 200
    rain = (rng.random(n + H) < 0.3).astype(float)
    y = np.maximum(0.0, rng.poisson(3, n + H) - 3 * rain)
    res = run_forecast("forecast-model-4", y[:n], H, 0.99, PERIODS, covariates=_matrix({"rain": rain}, n))
    assert min(res.lower) >= 0.0


def test_a_history_too_short_for_a_holdout_answers_univariate_with_a_note() -> None:
    y = [10.0, 12.0, 11.0, 13.0, 12.0]
    cm = CovariateMatrix(("x",), np.arange(5.0)[:, None], np.arange(5.0, 5 + H)[:, None], (False,))
    res = run_forecast("forecast-model-1", y, H, 0.9, (), covariates=cm)
    plain = run_forecast("forecast-model-1", y, H, 0.9, ())
    assert res.covariates_used is False and "short" in (res.covariates_note or "")
    assert res.median == plain.median


def test_levels_work_answers_every_confidence_from_one_covariate_fit() -> None:
    rng = np.random.default_rng(8)
    n = 250
    price = rng.normal(size=n + H)
    y = _weekly(n + H, rng) - 6 * price
    cm = _matrix({"price": price}, n)
    narrow, wide = LevelsWork(ForecastWork("forecast-model-2", y[:n], H, 0.5, PERIODS, cm), (0.8, 0.95)).run()
    single = ForecastWork("forecast-model-2", y[:n], H, 0.95, PERIODS, cm).run()
    assert wide == single
    assert narrow.median == wide.median and narrow.covariates_used is True
    assert np.all(np.asarray(wide.lower) <= np.asarray(narrow.lower))
    assert np.all(np.asarray(narrow.upper) <= np.asarray(wide.upper))


def test_without_covariates_the_univariate_path_is_untouched() -> None:
    rng = np.random.default_rng(9)
    y = _weekly(200, rng)
    a = run_forecast_multi("forecast-model-1", y, H, [0.8, 0.95], PERIODS)
    b = run_forecast_multi("forecast-model-1", y, H, [0.8, 0.95], PERIODS, covariates=None)
    assert a == b and all(r.covariates_used is None and r.covariates_note is None for r in a)


@pytest.mark.parametrize("history_rows, future_rows", [(99, H), (100, H - 1)])
def test_covariates_that_do_not_match_the_history_or_horizon_are_refused(history_rows: int, future_rows: int) -> None:
    cm = CovariateMatrix(("x",), np.zeros((history_rows, 1)), np.zeros((future_rows, 1)), (False,))
    with pytest.raises(ValueError, match="covariates"):
        run_forecast("forecast-model-2", np.arange(100.0), H, 0.9, (), covariates=cm)


def test_non_finite_future_values_of_a_known_ahead_column_are_refused() -> None:
    future = np.zeros((H, 1))
    future[3, 0] = np.nan
    cm = CovariateMatrix(("x",), np.zeros((100, 1)), future, (False,))
    with pytest.raises(ValueError, match="finite"):
        run_forecast("forecast-model-2", np.arange(100.0), H, 0.9, (), covariates=cm)


def test_a_failing_forecast_of_the_residual_series_answers_the_univariate_forecast() -> None:
    from app.compute.forecast import models
    from app.compute.forecast.regression import forecast_with_covariates

    rng = np.random.default_rng(10)
    n = 250
    price = rng.normal(size=n + H)
    y = _weekly(n + H, rng)[:n] - 6 * price[:n]

    def univariate(model_id: str, values: np.ndarray, horizon: int, confidences: list[float],
                   periods: tuple[int, ...]) -> list:
        if len(values) == n and not np.array_equal(values, y):  # the full history's residual series
            raise models.ForecastError("the model and its fallback failed")
        return models._univariate(model_id, values, horizon, confidences, periods)

    (res,) = forecast_with_covariates("forecast-model-2", y, H, [0.9], PERIODS, _matrix({"price": price}, n),
                                      univariate)
    assert res.covariates_used is False and "failed" in (res.covariates_note or "")
    assert res.median == run_forecast("forecast-model-2", y, H, 0.9, PERIODS).median
