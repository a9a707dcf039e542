"""Model guarantees: property-based and explicit edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.compute.forecast import models
from app.compute.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS, describe_models
from app.compute.forecast.fallback import SeasonalNaive
from app.compute.forecast.models import ForecastError, run_forecast, run_forecast_multi
from app.compute.forecast.results import ForecastResult
from app.series.frequencies import seasonal_periods

FREQUENCIES = ("Seconds", "Minutes", "Hours", "Daily", "Weekly", "Monthly", "Quarterly", "Yearly")


def check_result(res: ForecastResult, horizon: int) -> None:
    assert isinstance(res, ForecastResult)
    for arr in (res.median, res.lower, res.upper):
        assert len(arr) == horizon
        assert all(isinstance(v, float) for v in arr)
        assert np.all(np.isfinite(arr))
    lo, med, up = np.array(res.lower), np.array(res.median), np.array(res.upper)
    assert np.all(lo <= med)
    assert np.all(med <= up)


@st.composite
def series(draw: st.DrawFn, max_len: int = 5000, nonnegative: bool = False) -> np.ndarray:
    """Random level + trend + seasonality + noise (+ spikes, steps, exact repeats), any magnitude."""
    n = draw(st.integers(10, max_len))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    mag = 10.0 ** draw(st.integers(-9, 12))
    period = draw(st.sampled_from([2, 4, 7, 12, 24, 52, 60, 168]))
    y = (rng.normal() * 5 + rng.normal() * 0.01 * t + rng.uniform(0, 3) * np.sin(2 * np.pi * t / period)
         + rng.uniform(0, 2) * rng.standard_normal(n))
    kind = draw(st.sampled_from(["plain", "spikes", "step", "integers", "random_walk", "flat_tail"]))
    if kind == "spikes":
        idx = rng.integers(0, n, size=max(1, n // 50))
        y[idx] += rng.uniform(20, 200, size=len(idx))
    elif kind == "step":
        y[n // 2:] += 30
    elif kind == "integers":
        y = np.round(y)
    elif kind == "random_walk":
        y = np.cumsum(rng.standard_normal(n))
    elif kind == "flat_tail":
        y[n // 2:] = y[n // 2]
    if nonnegative:
        y = np.abs(y)
        if draw(st.booleans()):
            y[rng.random(n) < 0.3] = 0.0  # intermittent / zero-inflated
    return y * mag


common = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("model_id", MODEL_IDS)
@common
@given(y=series(), freq=st.sampled_from(FREQUENCIES), horizon=st.integers(1, 100),
       c1=st.floats(0.1, 0.99), c2=st.floats(0.1, 0.99))
def test_guarantees_property(model_id, y, freq, horizon, c1, c2):
    periods = seasonal_periods(freq, 1, len(y))
    lo_c, hi_c = sorted((c1, c2))
    res_lo, res_hi = run_forecast_multi(model_id, y.tolist(), horizon, [lo_c, hi_c], periods)
    for res in (res_lo, res_hi):
        check_result(res, horizon)
        assert res.fallback is None, res.fallback  # the model itself must cope with any such series
    # higher confidence never narrower, same median
    assert res_hi.median == res_lo.median
    assert np.all(np.array(res_hi.lower) <= np.array(res_lo.lower))
    assert np.all(np.array(res_hi.upper) >= np.array(res_lo.upper))
    # run_forecast gives the same numbers, deterministically
    again = run_forecast(model_id, y.tolist(), horizon, hi_c, periods)
    assert again == res_hi


@common
@given(y=series(max_len=3000, nonnegative=True), freq=st.sampled_from(FREQUENCIES),
       horizon=st.integers(1, 100), conf=st.floats(0.1, 0.99))
def test_model4_never_negative(y, freq, horizon, conf):
    res = run_forecast("forecast-model-4", y.tolist(), horizon, conf, seasonal_periods(freq, 1, len(y)))
    check_result(res, horizon)
    assert min(res.lower) >= 0.0


def _edge_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    spike = np.zeros(200)
    spike[120] = 1e6
    return {
        "constant": np.full(300, 42.0),
        "zeros": np.zeros(300),
        "single_spike": spike,
        "huge": 1e12 + 1e10 * rng.standard_normal(400),
        "huge_constant_offset": 1e12 + rng.standard_normal(400),
        "tiny": 1e-9 * (1 + 0.1 * rng.standard_normal(400)),
        "extreme_1e300": 1e300 * (1 + 0.1 * rng.standard_normal(300)),
        "negative": -50 - np.cumsum(rng.standard_normal(400)),
        "exactly_10": np.array([3.0, 5, 4, 6, 5, 7, 6, 8, 7, 9]),
        "ten_constant": np.full(10, -1.5),
        "alternating": np.tile([0.0, 1e6], 150),
    }


EDGES = _edge_cases()


@pytest.mark.parametrize("model_id", MODEL_IDS)
@pytest.mark.parametrize("case", sorted(EDGES))
@pytest.mark.parametrize("freq", ["Hours", "Weekly", "Yearly"])
def test_edge_cases(model_id, case, freq):
    y = EDGES[case]
    for horizon in (1, 48, 100):
        res = run_forecast(model_id, y.tolist(), horizon, 0.95, seasonal_periods(freq, 1, len(y)))
        check_result(res, horizon)
        assert res.fallback is None
        med = np.array(res.median)
        span = max(float(np.ptp(y)), float(np.max(np.abs(y))), 1e-300)
        # forecasts stay on the data's scale (no blow-up from normalisation)
        assert np.all(np.abs(med - np.median(y)) <= 10 * span)


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_constant_series_forecast_is_the_constant(model_id):
    for value in (0.0, 42.0, -3.5, 1e12, 1e-9):
        res = run_forecast(model_id, [value] * 50, 5, 0.9, seasonal_periods("Daily", 1, 50))
        assert res.median == pytest.approx([value] * 5, rel=1e-9, abs=1e-300)
        assert res.lower[0] <= value <= res.upper[0]


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_scale_invariance(model_id):
    rng = np.random.default_rng(3)
    t = np.arange(500)
    y = 100 + 10 * np.sin(2 * np.pi * t / 24) + rng.standard_normal(500)
    per = seasonal_periods("Hours", 1, 500)
    a = run_forecast(model_id, y.tolist(), 24, 0.8, per)
    b = run_forecast(model_id, (y * 1e10).tolist(), 24, 0.8, per)
    np.testing.assert_allclose(np.array(b.median) / 1e10, a.median, rtol=1e-6)
    np.testing.assert_allclose(np.array(b.upper) / 1e10, a.upper, rtol=1e-6)


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_seasonal_pattern_is_followed(model_id):
    """A clean daily cycle must be forecast far better than by its mean (the models can fail this)."""
    rng = np.random.default_rng(11)
    t = np.arange(24 * 30 + 48)
    y = 50 + 20 * np.sin(2 * np.pi * t / 24) + 0.5 * rng.standard_normal(len(t))
    hist, future = y[:-48], y[-48:]
    res = run_forecast(model_id, hist.tolist(), 48, 0.9, seasonal_periods("Hours", 1, len(hist)))
    mae = np.mean(np.abs(np.array(res.median) - future))
    assert mae < 2.0
    inside = np.mean((future >= np.array(res.lower)) & (future <= np.array(res.upper)))
    assert inside >= 0.7


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_trend_is_followed(model_id):
    y = 10 + 0.5 * np.arange(200) + np.random.default_rng(5).standard_normal(200) * 0.3
    res = run_forecast(model_id, y.tolist(), 10, 0.9, seasonal_periods("Daily", 1, 200))
    assert res.median[-1] > y[-1] + 1.0  # keeps going up


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_100k_points_capped(model_id):
    rng = np.random.default_rng(1)
    t = np.arange(100_000)
    y = 100 + 10 * np.sin(2 * np.pi * t / 1440) + rng.standard_normal(len(t))
    per = seasonal_periods("Minutes", 1, len(y))
    assert per == (60, 1440)
    res = run_forecast(model_id, y.tolist(), 100, 0.95, per)  # speed at this size: make bench
    check_result(res, 100)
    assert res.fallback is None


def test_model4_clips_at_zero_only_for_nonnegative_history():
    y = np.abs(np.random.default_rng(2).standard_normal(300)) * 0.1
    y[::7] = 0.0
    res = run_forecast("forecast-model-4", y.tolist(), 30, 0.99, ())
    assert min(res.lower) >= 0.0
    neg = y - 0.05
    res2 = run_forecast("forecast-model-4", neg.tolist(), 30, 0.99, ())
    assert min(res2.lower) < 0.0


def test_model4_robust_to_spikes():
    rng = np.random.default_rng(4)
    t = np.arange(24 * 20)
    y = 100 + 10 * np.sin(2 * np.pi * t / 24) + rng.standard_normal(len(t))
    spiky = y.copy()
    spiky[-30:][::6] += 5000  # recent huge spikes
    per = seasonal_periods("Hours", 1, len(y))
    clean = run_forecast("forecast-model-4", y.tolist(), 24, 0.9, per)
    dirty = run_forecast("forecast-model-4", spiky.tolist(), 24, 0.9, per)
    assert np.max(np.abs(np.array(dirty.median) - np.array(clean.median))) < 5.0


# --------------------------------------------------------------------------------------------------
# fallback


class _Boom(SeasonalNaive):
    def fit(self, values, horizon, periods):
        raise RuntimeError("boom")


class _NaN(SeasonalNaive):
    def point(self, name, y, h, periods):
        return np.full(h, np.nan)


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_fallback_is_used_and_reported(model_id, monkeypatch):
    monkeypatch.setitem(models.REGISTRY, model_id, _Boom())
    fb_name, fb_model = models.FALLBACKS[model_id]
    if isinstance(fb_model, _Boom) or fb_name == model_id:
        pytest.fail("fallback must be a different model")
    res = run_forecast(model_id, list(range(50)), 5, 0.9, ())
    check_result(res, 5)
    assert res.fallback is not None
    assert fb_name in res.fallback and "RuntimeError" in res.fallback
    assert res.fallback.isascii() and "\n" not in res.fallback and len(res.fallback) < 200


def test_bad_output_triggers_fallback(monkeypatch):
    monkeypatch.setitem(models.REGISTRY, "forecast-model-2", _NaN())
    res = run_forecast("forecast-model-2", [1.0, 2.0, 3.0] * 10, 4, 0.5, ())
    check_result(res, 4)
    assert res.fallback is not None


def test_forecast_error_when_fallback_fails_too(monkeypatch):
    monkeypatch.setitem(models.REGISTRY, "forecast-model-1", _Boom())
    monkeypatch.setitem(models.FALLBACKS, "forecast-model-1", ("forecast-model-2", _Boom()))
    with pytest.raises(ForecastError):
        run_forecast("forecast-model-1", list(range(50)), 5, 0.9, ())


def test_no_fallback_normally():
    res = run_forecast(DEFAULT_MODEL_ID, list(range(50)), 5, 0.9, ())
    assert res.fallback is None


# --------------------------------------------------------------------------------------------------
# interface


def test_seasonal_periods():
    assert seasonal_periods("Hours", 1, 1000) == (24, 168)
    assert seasonal_periods("Hours", 1, 100) == (24,)
    assert seasonal_periods("Hours", 1, 47) == ()
    assert seasonal_periods("Hours", 2, 1000) == (12, 84)
    assert seasonal_periods("Hours", 5, 1000) == ()
    assert seasonal_periods("Minutes", 5, 10000) == (12, 288)
    assert seasonal_periods("Minutes", 30, 100) == (2, 48)
    assert seasonal_periods("Minutes", 60, 100) == (24,)
    assert seasonal_periods("Seconds", 60, 1000) == ()
    assert seasonal_periods("Seconds", 1, 120) == (60,)
    assert seasonal_periods("Seconds", 1, 119) == ()
    assert seasonal_periods("Daily", 1, 730) == (7, 365)
    assert seasonal_periods("Daily", 7, 730) == ()
    assert seasonal_periods("Weekly", 1, 104) == (52,)
    assert seasonal_periods("Weekly", 2, 60) == (26,)
    assert seasonal_periods("Monthly", 1, 24) == (12,)
    assert seasonal_periods("Monthly", 3, 24) == (4,)
    assert seasonal_periods("Monthly", 6, 24) == (2,)
    assert seasonal_periods("Monthly", 12, 24) == ()
    assert seasonal_periods("Quarterly", 1, 8) == (4,)
    assert seasonal_periods("Yearly", 1, 1000) == ()


def test_describe_models():
    d = describe_models()
    assert [m["id"] for m in d] == list(MODEL_IDS)
    assert DEFAULT_MODEL_ID == MODEL_IDS[0]
    for m in d:
        assert set(m) == {"id", "description", "covariates"}
        assert m["covariates"] is True  # every model takes covariates through the one regression
        assert m["description"] and "\n" not in m["description"] and m["description"].isascii()
    assert len({m["description"] for m in d}) == 4


def test_short_yearly_growth_is_continued():
    """A 16-point yearly series growing ~6% a year with noise: the short-history pool (a combination of
    exponential smoothing, Theta, damped trend and drift, or drift alone) keeps the growth going, and the
    95% interval holds the next six values, which a level forecast would leave below its median."""
    rng = np.random.default_rng(21)
    y = 100 * 1.06 ** np.arange(22) * (1 + 0.02 * rng.standard_normal(22))
    hist, future = y[:16], y[16:]
    res = run_forecast(DEFAULT_MODEL_ID, hist.tolist(), 6, 0.95, seasonal_periods("Yearly", 1, 16))
    med = np.array(res.median)
    assert np.all(np.diff(med) > 0)
    assert med[-1] > hist[-1] * 1.2
    assert np.all((future >= np.array(res.lower)) & (future <= np.array(res.upper)))


def test_cut_windows_floor_the_horizon_growth():
    """Errors whose far steps were seen only at a few early origins (windows cut at the end of a short
    history) cannot claim that errors do not grow with the horizon: the exponent is at least 0.5."""
    from app.compute.forecast.intervals import fit_errors

    rng = np.random.default_rng(4)
    flat = rng.standard_normal((12, 6))  # same spread at every step: fitted growth ~0
    assert fit_errors(flat, 1.0).b < 0.3
    cut = flat.copy()
    for j in range(12):
        cut[j, 6 - j // 2:] = np.nan  # the newest origins see only the first steps
    assert fit_errors(cut, 1.0).b >= 0.5


def test_trend_floor_applies_at_any_cut_window():
    """A trend extrapolation's errors grow at least like k ** TREND_CUT_POWER as soon as one window was
    cut at the end of the history; other errors keep their fitted growth unless most windows were cut,
    and whole windows always keep it."""
    from app.compute.forecast.intervals import TREND_CUT_POWER, fit_errors

    rng = np.random.default_rng(4)
    flat = rng.standard_normal((12, 6))
    assert fit_errors(flat, 1.0).b < 0.3
    one_cut = flat.copy()
    one_cut[0, 5:] = np.nan  # only the newest origin misses the last step
    assert fit_errors(one_cut, 1.0).b < 0.3
    assert fit_errors(one_cut, 1.0, trend=True).b >= TREND_CUT_POWER
    assert fit_errors(flat, 1.0, trend=True).b < 0.3


def test_a_growth_floor_widens_far_steps_without_narrowing_near_ones():
    """A floor on the horizon exponent says errors grow at least that fast, not that the first steps'
    errors are smaller than measured: with the floor, every step's interval is at least as wide as
    without it, at every confidence and for symmetric and signed quantiles, and the far steps are wider."""
    from app.compute.forecast.intervals import TREND_CUT_POWER, fit_errors

    rng = np.random.default_rng(4)
    cut = rng.standard_normal((12, 6))  # errors that barely grow over the horizon
    cut[:3, 4:] = np.nan  # the three newest windows cut at the end of the history
    orgs = list(range(40, 4, -3))
    plain = fit_errors(cut, 1.0, orgs=orgs)  # the fitted growth: too few windows cut for the random-walk floor
    floored = fit_errors(cut, 1.0, orgs=orgs, trend=True)
    assert plain.b < 0.3 < TREND_CUT_POWER == floored.b
    for c in (0.5, 0.8, 0.95, 0.99):
        with_floor, without = floored.half_widths(8, c)[0], plain.half_widths(8, c)[0]
        assert np.all(with_floor >= without - 1e-12), c
        assert with_floor[-1] > without[-1], c
        for signed_with, signed_without in zip(floored.asymmetric(8, c), plain.asymmetric(8, c), strict=True):
            assert np.all(signed_with >= signed_without - 1e-12), c


def test_interval_follows_a_multiplicative_season():
    """Quarterly tourist numbers: a strong multiplicative season whose noise grows with it. The high
    season's errors no longer set one width for every step: the interval is wider in the high season
    than in the low season after it, by about the square root of the seasonal ratio, and still holds
    the next eight values."""
    rng = np.random.default_rng(7)
    n, h = 60, 8
    season = np.array([0.5, 0.8, 1.1, 1.6])
    t = np.arange(n + h)
    level = 1000.0 * (1.0 + 0.005 * t)
    y = level * season[t % 4] * (1.0 + 0.04 * rng.standard_normal(n + h))
    for model_id in MODEL_IDS:
        res = run_forecast(model_id, y[:n].tolist(), h, 0.95, seasonal_periods("Quarterly", 1, n))
        width = np.array(res.upper) - np.array(res.lower)
        high, low = width[3], width[4]  # steps 4 and 5: quarters 4 (index 1.6) and 1 (index 0.5)
        assert high > 1.3 * low, (model_id, width)
        future = y[n:]
        assert np.mean((future >= np.array(res.lower)) & (future <= np.array(res.upper))) >= 0.75, model_id


def test_seasonal_errors_round_trip():
    """Errors divided by their time point's seasonal scale, and the future steps' scale continuing the
    same positions."""
    from app.compute.forecast.intervals import LEVEL_POWER, seasonal_errors

    idx = np.array([0.5, 1.0, 1.5, 1.0])
    errs = np.ones((2, 3))
    out, fut = seasonal_errors(errs, [5, 8], 10, idx)
    sc = idx ** LEVEL_POWER
    assert np.allclose(out[0], 1.0 / sc[[1, 2, 3]])  # origin 5 forecasts points 5, 6, 7
    assert np.allclose(out[1], 1.0 / sc[[0, 1, 2]])  # origin 8: points 8, 9, 10
    assert np.allclose(fut, sc[[2, 3, 0, 1]])  # the step after point 9 is point 10


def _record_decompositions(monkeypatch) -> list[int]:
    """The length of every history model-3 decomposes from now on, in call order."""
    from app.compute.forecast import model_3_mstl

    real = model_3_mstl.seasonal_components
    lengths: list[int] = []

    def recording(x, periods, seasonal):
        lengths.append(len(x))
        return real(x, periods, seasonal)

    monkeypatch.setattr(model_3_mstl, "seasonal_components", recording)
    return lengths


def test_model3_origins_decompose_only_their_own_history(monkeypatch):
    """STL smooths both ways: components taken from the whole history would let every rolling origin see
    the window it is judged on, and the interval would rest on optimistic errors. Each origin decomposes
    exactly the points before it; only the final forecast decomposes the whole history."""
    from app.compute.forecast.intervals import origins
    from app.compute.forecast.model_3_mstl import MSTLForecaster
    from app.compute.forecast.template import min_train

    lengths = _record_decompositions(monkeypatch)
    rng = np.random.default_rng(3)
    n, t = 1000, np.arange(1000)
    y = 50 + 10 * np.sin(2 * np.pi * t / 24) + 4 * np.sin(2 * np.pi * t / 168) + rng.standard_normal(n)
    model = MSTLForecaster()
    model.fit(y.tolist(), 48, (24, 168))
    expected, _ = origins(n, 48, min_train(n, (24, 168)), model.whole_origins)
    assert len(expected) == 8
    assert sorted(lengths) == sorted([*expected, n])


@pytest.mark.parametrize("n, whole", [(120, 8), (56, 6), (36, 0)])
def test_model3_takes_up_to_8_whole_windows(monkeypatch, n, whole):
    """Model-3 is judged at up to 8 whole windows where at least 4 fit: with 4, a long history's errors rested
    on a few independent values and the small-sample widening over-covered (Tourism Quarterly). A history with
    room for fewer than 4 keeps its origins spread over it, windows cut at its end."""
    from app.compute.forecast.intervals import origins
    from app.compute.forecast.model_3_mstl import MSTLForecaster

    lengths = _record_decompositions(monkeypatch)
    t = np.arange(n)
    noise = np.random.default_rng(n).standard_normal(n)
    y = 100 + 0.5 * t + 20 * np.tile([1.0, -0.5, 0.8, -1.3], n)[:n] + 2 * noise
    MSTLForecaster().fit(y.tolist(), 8, (4,))
    assert max(lengths) == n and lengths.count(n) == 1  # the final forecast decomposes the whole history
    at_origins = sorted(x for x in lengths if x < n)
    if whole:
        assert at_origins == sorted(n - 8 * (j + 1) for j in range(whole))
    else:
        spread, _ = origins(n, 8, 8, 4, short=True)
        assert len(spread) >= 4 and at_origins == sorted(spread)


def test_short_monthly_without_season_chooses_level_or_trend():
    """48 monthly points, no season: simple exponential smoothing alone competes with the equal-weight
    combination of the four level/trend members. A level with noise gets a level forecast (the members
    that project a trend made larger errors at the origins); a steady climb gets its trend continued."""
    rng = np.random.default_rng(5)
    per = seasonal_periods("Monthly", 1, 48)
    assert per == (12,)
    level = 200 + 3 * rng.standard_normal(48)
    med = np.array(run_forecast(DEFAULT_MODEL_ID, level.tolist(), 18, 0.9, per).median)
    assert np.ptp(med) < 1e-9 * abs(med[0])
    assert abs(med[0] - level.mean()) < 3
    climb = 100 + 2.0 * np.arange(48) + 3 * rng.standard_normal(48)
    med = np.array(run_forecast(DEFAULT_MODEL_ID, climb.tolist(), 18, 0.9, per).median)
    assert np.all(np.diff(med) > 0)
    assert med[-1] > med[0] + 5


@pytest.mark.parametrize(("frequency", "step", "n", "offered"), [
    ("Hours", 1, 1000, True),      # periods (24, 168): 3 cycles are 72 points, 5 cycles 120
    ("Weekly", 1, 300, True),      # period 52: 156 and 260 points
    ("Monthly", 1, 200, False),    # period 12: both windows are the 60-point floor
    ("Minutes", 5, 2000, False),   # periods (12, 288): the shortest period decides, as above
])
@pytest.mark.parametrize(("model_id", "members"), [
    ("forecast-model-1", ("otm_sa3", "damped_sa3")),
    ("forecast-model-2", ("otm_sa3",)),
])
def test_three_cycle_members_only_where_they_differ_from_five(monkeypatch, frequency, step, n, offered,
                                                              model_id, members):
    """Models 1 and 2 offer members on the last 3 cycles only for seasons longer than 12 points; for
    shorter ones that window is the same RECENT_FLOOR points as the 5-cycle one, and a duplicate member
    would count twice among the chosen."""
    from app.compute.forecast.candidates import CANDIDATES, THREE_CYCLE_POOL

    assert model_id != DEFAULT_MODEL_ID or members == THREE_CYCLE_POOL
    run: set[str] = set()
    for name in THREE_CYCLE_POOL:
        real = CANDIDATES[name]
        monkeypatch.setitem(CANDIDATES, name, lambda y, h, p, name=name, real=real: run.add(name) or real(y, h, p))
    rng = np.random.default_rng(11)
    t = np.arange(n)
    per = seasonal_periods(frequency, step, n)
    y = 100 + 10 * np.sin(2 * np.pi * t / per[0]) + 0.02 * t + rng.standard_normal(n)
    run_forecast(model_id, y.tolist(), 12, 0.9, per)
    assert run == (set(members) if offered else set())


def test_three_cycle_member_reads_the_last_three_cycles():
    from app.compute.forecast.candidates import CANDIDATES

    rng = np.random.default_rng(12)
    y = 1 + 0.1 * np.sin(2 * np.pi * np.arange(500) / 24) + 0.01 * rng.standard_normal(500)
    got = CANDIDATES["otm_sa3"](y, 24, (24, 168))
    assert np.array_equal(got, CANDIDATES["otm_sa"](y[-72:], 24, (24,)))
    assert not np.array_equal(got, CANDIDATES["otm_sa5"](y, 24, (24, 168)))


def test_combination_weights_follow_the_origin_errors():
    from app.compute.forecast.combination import combination_weights

    w = combination_weights(np.array([0.1, 0.2, 0.4]), 2.0)
    assert w.sum() == pytest.approx(1.0)
    assert w[0] / w[1] == pytest.approx(4.0) and w[1] / w[2] == pytest.approx(4.0)
    assert np.allclose(combination_weights(np.array([0.1, 0.2, 0.4]), 0.0), 1 / 3)
    # a member that forecast every window exactly keeps a finite weight, shared with any other such member
    w = combination_weights(np.array([0.0, 0.0, 0.3]), 2.0)
    assert np.all(np.isfinite(w)) and w[0] == pytest.approx(0.5) and w[2] < 1e-12


def test_members_are_weighted_by_their_origin_errors(monkeypatch):
    """Model-1 averages its chosen members weighted by (1 / origin sMAPE) ** WEIGHT_POWER: on a trending
    series a drift member (close at every origin) outweighs a no-change one (always behind), so the median
    sits nearer the drift forecast than the equal-weight mean does, and at power 0 it is that mean."""
    from app.compute.forecast.candidates import CANDIDATES
    from app.compute.forecast.combination import WEIGHT_POWER
    from app.compute.forecast.model_1_combination import ValidatedCombination
    from app.compute.forecast.seasons import MODEL_1_SEASONS, with_rules

    def drift(y: np.ndarray, h: int, p: tuple[int, ...]) -> np.ndarray:
        return y[-1] + (y[-1] - y[0]) / (len(y) - 1) * np.arange(1, h + 1)

    def level(y: np.ndarray, h: int, p: tuple[int, ...]) -> np.ndarray:
        return np.full(h, y[-1])

    monkeypatch.setitem(CANDIDATES, "test_drift", drift)
    monkeypatch.setitem(CANDIDATES, "test_level", level)
    rng = np.random.default_rng(5)
    y = 100 + 0.5 * np.arange(200) + rng.standard_normal(200)
    pools = dict(level_pool=("test_drift", "test_level"), seasonal_pool=(), three_cycle_pool=(),
                 seasons=with_rules(MODEL_1_SEASONS, keep=2, short_pool=()))
    weighted = ValidatedCombination(**pools).fit(y.tolist(), 10, ()).predict(0.9)[0]
    equal = ValidatedCombination(**pools, weight_power=0.0).fit(y.tolist(), 10, ()).predict(0.9)[0]
    d, lv = drift(y, 10, ()), level(y, 10, ())
    assert WEIGHT_POWER > 0
    assert np.allclose(equal, (d + lv) / 2)
    share = (weighted - lv) / (d - lv)  # the drift member's weight, step by step
    assert np.allclose(share, share[0]) and 0.5 < share[0] < 1.0


def test_with_fixed_share_splits_the_weight():
    from app.compute.forecast.combination import with_fixed_share

    chosen, weights = np.array([0, 2]), np.array([0.75, 0.25])
    assert with_fixed_share(chosen, weights, np.array([4]), 0.0, 5) == (chosen, weights)
    keep, w = with_fixed_share(chosen, weights, np.array([4]), 0.5, 5)
    assert keep.tolist() == [0, 2, 4] and np.allclose(w, [0.375, 0.125, 0.5])
    # a fixed member that the ranking chose as well gets both parts
    keep, w = with_fixed_share(chosen, weights, np.array([2]), 0.5, 5)
    assert keep.tolist() == [0, 2] and np.allclose(w, [0.375, 0.625])


@pytest.mark.parametrize(("period", "n", "fixed"), [(4, 120, True), (4, 60, False), (12, 120, True), (12, 60, False)])
def test_long_seasonal_histories_give_the_pair_a_fixed_share(monkeypatch, period, n, fixed):
    """Model-1's pair pool holds the season table's pair share (quarterly data: a half, monthly data: a quarter) of the
    combination for a strongly seasonal history longer than 60 points even when the origins rank it last; a
    shorter one keeps the ranked members only."""
    from app.compute.forecast.candidates import CANDIDATES, seasonal_strength
    from app.compute.forecast.combination import STRENGTH_GATE
    from app.compute.forecast.model_1_combination import ValidatedCombination
    from app.compute.forecast.seasons import MODEL_1_SEASONS, Season, with_rules

    PAIR_SHARE_QUARTERLY = MODEL_1_SEASONS[Season.QUARTERLY].pair_share
    PAIR_SHARE_MONTHLY = MODEL_1_SEASONS[Season.MONTHLY].pair_share

    def repeat(y: np.ndarray, h: int, p: tuple[int, ...]) -> np.ndarray:
        return np.resize(y[-period:], h)

    def flat(y: np.ndarray, h: int, p: tuple[int, ...]) -> np.ndarray:
        return np.full(h, np.mean(y))

    monkeypatch.setitem(CANDIDATES, "test_repeat", repeat)
    monkeypatch.setitem(CANDIDATES, "test_flat", flat)
    # model-3's fixed share on short quarterly histories is tested on its own (below)
    pools = dict(level_pool=("test_repeat",), seasonal_pool=(), three_cycle_pool=(), pair_pool=(("test_flat",),))
    rules = dict(keep=1, short_pool=(), mstl_share=0.0)
    t = np.arange(n)
    y = 100 + 20 * np.sin(2 * np.pi * t / period + 0.3) + np.random.default_rng(23).standard_normal(n)
    assert seasonal_strength(y / np.mean(np.abs(y)), period) >= STRENGTH_GATE
    med = ValidatedCombination(**pools, seasons=with_rules(MODEL_1_SEASONS, **rules)).fit(
        y.tolist(), 8, (period,)).predict(0.9)[0]
    share = (PAIR_SHARE_QUARTERLY if period == 4 else PAIR_SHARE_MONTHLY) if fixed else 0.0
    assert 0 < PAIR_SHARE_MONTHLY < PAIR_SHARE_QUARTERLY < 1
    assert np.allclose(med, (1 - share) * repeat(y, 8, (period,)) + share * flat(y, 8, (period,)))
    ranked_only = ValidatedCombination(**pools, seasons=with_rules(MODEL_1_SEASONS, **rules, pair_share=0.0)).fit(
        y.tolist(), 8, (period,)).predict(0.9)[0]
    assert np.allclose(ranked_only, repeat(y, 8, (period,)))


@pytest.mark.parametrize(("period", "n", "amplitude", "fixed"), [
    (4, 40, 20.0, True),    # short strongly seasonal quarterly history
    (4, 12, 20.0, True),    # three years
    (4, 120, 20.0, False),  # long: the Theta pair's share instead
    (4, 40, 0.0, False),    # no season
    (12, 40, 20.0, False),  # monthly
])
def test_short_seasonal_quarterly_histories_give_model_3_a_fixed_share(monkeypatch, period, n, amplitude, fixed):
    """Model-1 gives model-3's median (mstl_median) the season table's share (0.3) of the combination on a
    strongly seasonal quarterly history of at most 60 points, even when the origins rank it last, and nowhere else."""
    from app.compute.forecast import model_1_combination
    from app.compute.forecast.candidates import CANDIDATES, seasonal_strength
    from app.compute.forecast.combination import STRENGTH_GATE
    from app.compute.forecast.model_1_combination import ValidatedCombination
    from app.compute.forecast.seasons import MODEL_1_SEASONS, Season, with_rules

    MSTL_SHARE_QUARTERLY = MODEL_1_SEASONS[Season.QUARTERLY].mstl_share

    def repeat(y: np.ndarray, h: int, p: tuple[int, ...]) -> np.ndarray:
        return np.resize(y[-period:], h) if amplitude else np.full(h, y[-1])

    def flat(y: np.ndarray, h: int, p: tuple[int, ...]) -> np.ndarray:
        return np.full(h, 0.9 * np.mean(y))

    monkeypatch.setitem(CANDIDATES, "test_repeat", repeat)
    monkeypatch.setattr(model_1_combination, "mstl_median", flat)
    pools = dict(level_pool=("test_repeat",), seasonal_pool=(), three_cycle_pool=(), pair_pool=(),
                 seasons=with_rules(MODEL_1_SEASONS, keep=1, short_pool=()))
    t = np.arange(n)
    y = 100 + amplitude * np.sin(2 * np.pi * t / period + 0.3) + np.random.default_rng(24).standard_normal(n)
    strong = seasonal_strength(y / np.mean(np.abs(y)), period) >= STRENGTH_GATE
    assert strong == (amplitude > 0)
    med = ValidatedCombination(**pools).fit(y.tolist(), 8, (period,)).predict(0.9)[0]
    share = MSTL_SHARE_QUARTERLY if fixed else 0.0
    assert 0 < MSTL_SHARE_QUARTERLY < 0.5
    assert np.allclose(med, (1 - share) * repeat(y, 8, (period,)) + share * flat(y, 8, (period,)))


@pytest.mark.parametrize(("model_id", "n", "runs"), [
    ("forecast-model-1", 40, True),
    ("forecast-model-1", 120, False),
    ("forecast-model-2", 40, False),
    ("forecast-model-4", 40, False),
])
def test_model_3_runs_at_model_1s_origins_on_short_seasonal_quarterly_data(monkeypatch, model_id, n, runs):
    """The model-3 member is fitted at each of model-1's rolling origins on the history before it (so model-1's
    interval holds its errors) and on the whole history; models 2 and 4, and long histories, do not run it."""
    from app.compute.forecast.model_1_combination import MSTL_POOL_MODEL

    lengths: list[int] = []
    real = MSTL_POOL_MODEL.fit
    monkeypatch.setattr(MSTL_POOL_MODEL, "fit", lambda y, h, p: lengths.append(len(y)) or real(y, h, p))
    t = np.arange(n)
    y = 100 + 20 * np.sin(2 * np.pi * t / 4) + 0.3 * t + np.random.default_rng(25).standard_normal(n)
    out = run_forecast(model_id, y.tolist(), 8, 0.9, (4,))
    assert out.fallback is None
    if runs:
        assert lengths.count(n) == 1 and len([k for k in lengths if k < n]) >= 8
    else:
        assert lengths == []


@pytest.mark.parametrize(("model_id", "frequency", "n", "kept"), [
    ("forecast-model-1", "Hours", 1000, 3),        # a season of 24 points: the best 3
    ("forecast-model-1", "Quarterly", 120, 3),     # a season of 4 points: the best 3
    ("forecast-model-1", "Monthly", 200, None),    # a season of 12 points: every member of the pool
    ("forecast-model-4", "Hours", 1000, 2),
    ("forecast-model-4", "Quarterly", 120, 2),
    ("forecast-model-4", "Monthly", 200, None),
    ("forecast-model-2", "Hours", 1000, 1),        # one of its three
    ("forecast-model-2", "Quarterly", 120, None),  # both of its two, weighted
    ("forecast-model-2", "Monthly", 200, None),
])
def test_how_many_members_are_kept(monkeypatch, model_id, frequency, n, kept):
    """Models 1, 2 and 4 forecast with the members they keep; only those are run on the whole history, so
    the members called with all n points are the kept ones."""
    from app.compute.forecast.candidates import CANDIDATES, seasonal_strength
    from app.compute.forecast.combination import STRENGTH_GATE

    model = models.REGISTRY[model_id]
    # a combined member (model-1's Theta pair) would call its parts whether or not they were kept alone
    if hasattr(model, "pair_pool"):
        monkeypatch.setattr(model, "pair_pool", ())
    per = seasonal_periods(frequency, 1, n)
    offered = set(model.level_pool) | set(model.seasonal_pool)
    if frequency == "Hours":
        offered |= set(getattr(model, "three_cycle_pool", ()))
    whole: set[str] = set()
    for name in offered:
        real = CANDIDATES[name]
        monkeypatch.setitem(CANDIDATES, name, lambda y, h, p, name=name, real=real: (
            whole.add(name) if len(y) == n else None) or real(y, h, p))
    rng = np.random.default_rng(21)
    t = np.arange(n)
    y = 100 + 20 * np.sin(2 * np.pi * t / per[0]) + 0.05 * t + rng.standard_normal(n)
    assert seasonal_strength((y / np.mean(np.abs(y))), per[0]) >= STRENGTH_GATE
    run_forecast(model_id, y.tolist(), 8, 0.9, per)
    assert len(whole) == (len(offered) if kept is None else kept)


@pytest.mark.parametrize(("frequency", "n", "offered"), [
    ("Quarterly", 120, True),
    ("Quarterly", 40, True),
    ("Monthly", 200, True),   # a long strongly seasonal monthly history
    ("Monthly", 48, False),
    ("Hours", 1000, False),
])
def test_model_2s_theta_pair_is_offered_where_it_helps(monkeypatch, frequency, n, offered):
    """Model-1 offers quarterly data, and long strongly seasonal monthly data, the mean of standard Theta on 5
    cycles and seasonal-position Theta as one member: its standard Theta part runs at the rolling origins there,
    and nowhere else in its pool."""
    from app.compute.forecast.candidates import CANDIDATES, THETA_PAIR_POOL

    assert THETA_PAIR_POOL == (("theta_sa5", "ptheta_s"),)
    calls: list[int] = []
    real = CANDIDATES["theta_sa5"]
    monkeypatch.setitem(CANDIDATES, "theta_sa5", lambda y, h, p: calls.append(len(y)) or real(y, h, p))
    per = seasonal_periods(frequency, 1, n)
    t = np.arange(n)
    y = 100 + 20 * np.sin(2 * np.pi * t / per[0]) + 0.05 * t + np.random.default_rng(22).standard_normal(n)
    run_forecast(DEFAULT_MODEL_ID, y.tolist(), 8, 0.9, per)
    assert (len([c for c in calls if c < n]) >= 8) == offered


@pytest.mark.parametrize(("points", "fits"), [(48, 1), (60, 1), (61, 2), (120, 2)])
def test_a_recent_member_that_reads_the_whole_history_is_fitted_once(monkeypatch: pytest.MonkeyPatch, points: int,
                                                                     fits: int) -> None:
    # model-1's "damped_sa5" reads the last 60 points: on a history of at most 60 it is "damped_sa" itself, so a
    # pool holding both fits damped trend once there, and gives each name the forecast it would have had alone
    from app.compute.forecast import candidates
    from app.compute.forecast.combination import forecast_each

    t = np.arange(points, dtype=float)
    y = 10 + 0.05 * t + 2 * np.sin(2 * np.pi * t / 12) + np.random.default_rng(points).normal(0, 0.3, points)
    names = ["damped_sa", "damped_sa5", "ses_sa5", "theta_sa5"]
    alone = [candidates.CANDIDATES[name](y, 18, (12,)) for name in names]
    calls = {"damped_sa": 0}
    damped = candidates.CANDIDATES["damped_sa"]

    def counted(values: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        calls["damped_sa"] += 1
        return damped(values, h, periods)

    monkeypatch.setitem(candidates.CANDIDATES, "damped_sa", counted)
    together = forecast_each(names, candidates.CANDIDATES.__getitem__, y, 18, (12,))
    assert all(np.array_equal(a, b) for a, b in zip(together, alone, strict=True))
    assert calls["damped_sa"] == fits
