"""The Nixtla routes' exogenous columns as the client sends them (series.X, series.X_future, hist_exog): each
series and each window gets its own rows, the columns known ahead their future values and the past-only ones
none, and every body that does not hold together is a clear 400 in Nixtla's shape before anything is spent or
computed (docs/nixtla.md). tests/e2e/test_nixtla_exogenous.py drives the real client."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from flask import Flask

from app.compat.nixtla import answers
from app.compat.nixtla.exogenous import MAX_COVARIATES
from app.compat.nixtla.schemas import read_series
from app.compute.forecast.work import LevelsWork
from tests.api.compat.nixtla.test_limits import hour_left
from tests.support import ROOMY_LIMITS, bearer, new_key, serving_app

N = 120
H = 4


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with serving_app(tmp_path_factory, "nixtla-exogenous") as application:
        yield application


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, ("read",), **ROOMY_LIMITS)[0]


def price(count: int, shift: int = 0) -> list[float]:
    return [round(2 + math.sin((i + shift) / 5), 2) for i in range(count)]


def driven(prices: list[float], shift: int = 0) -> list[float]:
    return [round(50 + 8 * math.sin(2 * math.pi * (i + shift) / 24) + 15 * p + ((i + shift) * 7 % 5) * 0.3, 2)
            for i, p in enumerate(prices)]


def two_series() -> tuple[dict[str, Any], list[list[float]]]:
    """Two hourly series driven by their own price (known ahead) with a past-only load; the body the client
    sends for them with X_df=[price] and hist_exog_list=[load]."""
    prices = [price(N + H), price(N + H, shift=9)]
    ys = [driven(prices[0][:N]), driven(prices[1][:N], shift=3)]
    load = [[float(i % 3) for i in range(N)], [float(i % 4) for i in range(N)]]
    body = {"series": {"y": ys[0] + ys[1], "sizes": [N, N], "start_datetime": ["2024-01-01T00:00:00"] * 2,
                       "X": [prices[0][:N] + prices[1][:N], load[0] + load[1]],
                       "X_future": [prices[0][N:] + prices[1][N:]]},
            "freq": "h", "h": H, "level": [80], "model": "timegpt-2.1"}
    return body, prices


def recorder() -> tuple[list[Any], Any]:
    seen: list[Any] = []

    def run(work: Any) -> Any:
        seen.append(work)
        return work.run()

    return seen, run


def test_each_series_gets_its_own_rows_and_future_values() -> None:
    body, prices = two_series()
    seen, run = recorder()
    out = answers.forecast(read_series(body, {}, max_points=10_000, forecast=True), max_points=10_000, run=run)
    assert len(seen) == 2 and all(isinstance(work, LevelsWork) for work in seen)
    for index, work in enumerate(seen):
        matrix = work.forecast.covariates
        assert matrix.past_only == (False, True) and matrix.names == ("X[0]", "X[1]")
        np.testing.assert_array_equal(matrix.history[:, 0], prices[index][:N])
        np.testing.assert_array_equal(matrix.future[:, 0], prices[index][N:])
        assert np.isnan(matrix.future[:, 1]).all()  # past-only: no future values
    assert len(out["mean"]) == 2 * H and set(out["intervals"]) == {"lo-80", "hi-80"}
    assert out["weights_x"] is None and out["feature_contributions"] is None
    assert out["exogenous"]["columns"] == ["X[0]", "X[1]"] and len(out["exogenous"]["used"]) == 2


def test_the_forecast_follows_the_future_values() -> None:
    """The same history with a high and a low future price: the model reads X_future, series by series."""
    body, _ = two_series()
    high, low = dict(body), dict(body)
    high["series"] = {**body["series"], "X_future": [[3.0] * (2 * H)]}
    low["series"] = {**body["series"], "X_future": [[1.0] * (2 * H)]}
    run = recorder()[1]
    up = answers.forecast(read_series(high, {}, max_points=10_000, forecast=True), max_points=10_000, run=run)
    down = answers.forecast(read_series(low, {}, max_points=10_000, forecast=True), max_points=10_000, run=run)
    assert up["exogenous"]["used"] == [True, True], up["exogenous"]
    # y moves 15 per unit of price: two units apart, the forecasts are far apart at every step
    assert all(a - b > 10 for a, b in zip(up["mean"], down["mean"], strict=True))


def test_a_cross_validation_window_reads_the_actual_values_over_its_horizon() -> None:
    body, prices = two_series()
    del body["series"]["X_future"]
    body.update(h=3, n_windows=2, step_size=3, hist_exog=[1])
    seen, run = recorder()
    out = answers.cross_validation(read_series(body, {}, max_points=10_000), max_points=10_000, run=run)
    assert len(seen) == 4 and out["sizes"] == [6, 6]
    cuts = [N - 6, N - 3]
    for work, (index, cut) in zip(seen, [(0, cuts[0]), (0, cuts[1]), (1, cuts[0]), (1, cuts[1])], strict=True):
        matrix = work.forecast.covariates
        assert matrix.history.shape == (cut, 2) and len(work.forecast.values) == cut
        np.testing.assert_array_equal(matrix.future[:, 0], prices[index][cut:cut + 3])
        assert matrix.past_only == (False, True) and np.isnan(matrix.future[:, 1]).all()


def test_null_values_of_y_take_their_covariate_rows_with_them() -> None:
    body, prices = two_series()
    body["series"]["y"][5] = None
    seen, run = recorder()
    answers.forecast(read_series(body, {}, max_points=10_000, forecast=True), max_points=10_000, run=run)
    first = seen[0].forecast
    assert len(first.values) == N - 1 and first.covariates.history.shape == (N - 1, 2)
    np.testing.assert_array_equal(first.covariates.history[:, 0], prices[0][:5] + prices[0][6:N])


def test_a_categorical_column_is_one_hot_per_series() -> None:
    """As POST /forecast encodes a categorical covariate: a column per value of the series' history but the
    first (sorted), numbers written alike (1 and 1.0 are one value), the future read the same way."""
    body, prices = two_series()
    promo = [["none", "big", "small"][i % 3] for i in range(N)] + [[1, 2.0][i % 2] for i in range(N)]
    body["series"].update(X=[prices[0][:N] + prices[1][:N], promo], categorical_exog=[1],
                          X_future=[prices[0][N:] + prices[1][N:], ["big"] * H + [1.0, 2, 2, 1]])
    seen, run = recorder()
    out = answers.forecast(read_series(body, {}, max_points=10_000, forecast=True), max_points=10_000, run=run)
    first, second = (work.forecast.covariates for work in seen)
    assert first.names == ("X[0]", "X[1]=none", "X[1]=small") and first.past_only == (False, False, False)
    np.testing.assert_array_equal(first.history[:4, 1:], [[1, 0], [0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(first.future[:, 1:], [[0, 0]] * H)
    assert second.names == ("X[0]", "X[1]=2")
    np.testing.assert_array_equal(second.history[:4, 1], [0, 1, 0, 1])
    np.testing.assert_array_equal(second.future[:, 1], [0, 1, 1, 0])
    assert out["exogenous"]["columns"] == ["X[0]", "X[1]"]


def test_a_categorical_column_with_one_value_in_a_series_gives_it_nothing_to_weigh() -> None:
    body, _ = two_series()
    body["series"].update(X=[["north"] * N + ["south"] * N], categorical_exog=[0], X_future=None)
    seen, run = recorder()
    out = answers.forecast(read_series(body, {}, max_points=10_000, forecast=True), max_points=10_000, run=run)
    assert [work.forecast.covariates for work in seen] == [None, None]
    assert out["exogenous"]["used"] == [False, False] and "categorical with one value" in out["exogenous"]["notes"][0]


def refused(app: Flask, key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = app.test_client().post(path, headers=bearer(key), json=body)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    return answer.get_json()


def changed(**series: Any) -> dict[str, Any]:
    body, _ = two_series()
    body["series"] = {**body["series"], **series}
    return body


@pytest.mark.parametrize(("body", "words"), [
    (changed(X=[price(2 * N)[:-1], [1.0] * (2 * N)]), "series.X[0] holds 239 values but series.y holds 240"),
    (changed(X_future=[price(2 * H - 1)]), "series.X_future[0] holds 7 values; 2 series x h=4 need 8"),
    (changed(X=[price(2 * N), [1.0] * 130 + [None] + [1.0] * 109]),
     "series.X[1] holds null (NaN) for series 1, row 10: exogenous values must be finite numbers"),
    (changed(X_future=[[1.0] * 5 + ["cheap"] + [1.0] * 2]), "holds 'cheap' for series 1, horizon step 2"),
    (changed(X=[price(2 * N), [True] * (2 * N)]), "series.X[1] holds True for series 0, row 0"),
    (changed(X_future=[price(2 * H), price(2 * H), price(2 * H)]), "series.X_future has 3 columns but series.X"),
    (changed(X=[[1.0] * (2 * N)] * (MAX_COVARIATES + 1), X_future=None),
     f"at most {MAX_COVARIATES} exogenous columns; this one sends {MAX_COVARIATES + 1}"),
    (changed(X=None), "series.X_future, hist_exog and categorical_exog need series.X"),
    (changed(X="price"), "series.X must be a list of columns"),
    (changed(categorical_exog=[1], X_future=[price(2 * H), ["b"] * (2 * H)],
             X=[price(2 * N), ["a", "b"] * (N // 2) + ["a", "c"] * (N // 2)]),
     "series 1: categorical column series.X[1] holds 'b' in the horizon, a value never seen in the series' "
     "history"),
    (changed(categorical_exog=[1], X=[price(2 * N), [f"v{i % 21}" for i in range(2 * N)]]),
     "series 0: categorical column series.X[1] holds 21 distinct values; a categorical column may hold at most 20"),
    (changed(categorical_exog=[1], X=[price(2 * N), ["a"] * 7 + [None] + ["a"] * (2 * N - 8)]),
     "series.X[1] holds null (NaN) for series 0, row 7: a categorical column's values must be strings"),
    (changed(categorical_exog=list(range(1, 20)), X_future=None,
             X=[price(2 * N)] + [[f"v{i % 4}" for i in range(2 * N)]] * 19),
     "series 0: its exogenous columns make 58 design columns"),
    (changed(categorical_exog=[2]), "categorical_exog must name distinct columns of series.X (0 to 1)"),
    ({**changed(), "hist_exog": [0]}, "hist_exog must name series.X's last 1 columns"),
    ({**changed(), "feature_contributions": True}, "Feature contributions (feature_contributions=True)"),
])
def test_a_forecast_body_that_does_not_hold_together_is_a_clear_400(app: Flask, key: str, body: dict[str, Any],
                                                                    words: str) -> None:
    detail = refused(app, key, "/v2/forecast", body)["detail"]
    assert words in detail, detail


@pytest.mark.parametrize(("fields", "words"), [
    ({"hist_exog": [2]}, "hist_exog must name distinct columns of series.X (0 to 1)"),
    ({"hist_exog": [1, 1]}, "hist_exog must name distinct columns"),
    ({"hist_exog": "load"}, "hist_exog must be a list of column indices"),
    ({"series_X_future": True}, "series.X_future is not read by cross-validation"),
])
def test_a_cross_validation_body_that_does_not_hold_together_is_a_clear_400(app: Flask, key: str,
                                                                            fields: dict[str, Any],
                                                                            words: str) -> None:
    body, _ = two_series()
    if not fields.pop("series_X_future", False):
        del body["series"]["X_future"]
    body.update(h=3, n_windows=2, **fields)
    detail = refused(app, key, "/v2/cross_validation", body)["detail"]
    assert words in detail, detail


@pytest.mark.parametrize("path", ["/v2/anomaly_detection", "/v2/online_anomaly_detection"])
def test_anomaly_detection_refuses_exogenous_columns_by_name(app: Flask, key: str, path: str) -> None:
    body, _ = two_series()
    del body["series"]["X_future"]
    body.update(level=99, detection_size=5)
    answer = refused(app, key, path, body)
    assert answer["code"] == "UNSUPPORTED_FEATURE"
    assert answer["detail"].startswith("Exogenous variables in anomaly detection")


def test_a_refused_body_spends_nothing_for_its_series(app: Flask) -> None:
    client = app.test_client()
    admin = new_key(app, ("admin",))[0]
    plain, key_id = new_key(app, ("read",), per_minute=100, per_hour=1000, per_day=10_000)
    bad = changed(X_future=[price(2 * H - 1)])
    assert client.post("/v2/forecast", headers=bearer(plain), json=bad).status_code == 400
    assert hour_left(client, app, admin, key_id) == 1000 - 1  # the refused call only


def test_the_route_answers_in_timegpts_shape(app: Flask, key: str) -> None:
    body, _ = two_series()
    answer = app.test_client().post("/v2/forecast", headers=bearer(key), json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    out = answer.get_json()
    assert set(out) == {"mean", "intervals", "weights_x", "feature_contributions", "exogenous"}
    assert len(out["mean"]) == 2 * H and len(out["intervals"]["lo-80"]) == 2 * H
    without = app.test_client().post("/v2/forecast", headers=bearer(key), json={
        **body, "series": {key_: body["series"][key_] for key_ in ("y", "sizes", "start_datetime")}}).get_json()
    assert "exogenous" not in without and without["mean"] != out["mean"]


ODD_VALUES = [None, [], {}, "x", 1.5, True, [None], [[]], [[None]], [["a"]], [[{"a": 1}]], [-1], [0, 0], [10**40],
              [[10**400] * 8], [["a"] * 8], [[1e308] * 8]]


@pytest.mark.parametrize("field", ["X", "X_future", "hist_exog", "categorical_exog"])
@pytest.mark.parametrize("path", ["/v2/forecast", "/v2/cross_validation"])
def test_odd_exogenous_fields_are_answered_never_a_500(app: Flask, key: str, field: str, path: str) -> None:
    for value in ODD_VALUES:
        body, _ = two_series()
        if path.endswith("cross_validation"):
            del body["series"]["X_future"]
            body.update(h=3, n_windows=2)
        if field == "hist_exog":
            body["hist_exog"] = value
        else:
            body["series"][field] = value
        answer = app.test_client().post(path, headers=bearer(key), json=body)
        assert answer.status_code in (200, 400), (value, answer.get_data(as_text=True)[:300])
