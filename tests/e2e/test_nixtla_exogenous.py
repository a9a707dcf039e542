"""Acceptance: Nixtla's own ``nixtla`` client (NixtlaClient 0.9, unchanged), pointed at a real gunicorn, forecasts
and cross-validates with exogenous variables (X_df, hist_exog_list, date_features with CountryHolidays) and gets
TimeGPT's frames back, each value what POST /forecast gives for the same series and covariates (docs/nixtla.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
import requests

from tests.support import REQUIRE_SERVICES, Server, bearer, cli_in_process, served_with_jobs

pytestmark = pytest.mark.slow

try:
    import holidays
    from nixtla import NixtlaClient
    from nixtla._http import ApiError
    from nixtla.date_features import CountryHolidays, SpecialDates
except ImportError:  # a dev dependency; with REQUIRE_SERVICES=1 (CI) its absence fails the run
    reason = "nixtla is not installed (pip install nixtla==0.9.0)"
    if REQUIRE_SERVICES:
        pytest.fail(f"required package missing (REQUIRE_SERVICES=1): {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

DAYS = 150
H = 7
FORMAT = "%Y-%m-%dT%H:%M:%S"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    folder = tmp_path_factory.mktemp("nixtla-exogenous")
    env = {"FORECAST_WORKERS": "1", "LOG_LEVEL": "WARNING", "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}"}
    with served_with_jobs(env, folder) as (server, _):
        key = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "100000",
                                        "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                        env=env).stdout)["key"]
        yield server, key


@pytest.fixture
def nixtla(served: tuple[Server, str]) -> NixtlaClient:
    # One attempt: a retried error would only hide what the test looks at.
    return NixtlaClient(api_key=served[1], base_url=served[0].url, max_retries=1, timeout=300)


def price_of(number: int, count: int) -> list[float]:
    return [round(2 + math.sin((i + 5 * number) / 6) + (0.8 if i % 9 == 0 else 0.0), 2) for i in range(count)]


def frames(count: int = 2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(df, X_df): daily series driven by a price known ahead (in X_df) and carrying a past-only load. Values
    have two decimals at most, so the client's float32 encoding sends the same numbers."""
    history, future = [], []
    for number in range(count):
        ds = pd.date_range("2023-01-02", periods=DAYS + H, freq="D")
        price = price_of(number, DAYS + H)
        y = [round(40 + 10 * number + 5 * (i % 7 in (5, 6)) + 12 * price[i] + (i * 7 % 5) * 0.4, 2)
             for i in range(DAYS)]
        load = [float((i * 3 + number) % 4) for i in range(DAYS)]
        history.append(pd.DataFrame({"unique_id": f"shop-{number}", "ds": ds[:DAYS], "y": y, "price": price[:DAYS],
                                     "load": load}))
        future.append(pd.DataFrame({"unique_id": f"shop-{number}", "ds": ds[DAYS:], "price": price[DAYS:]}))
    # X_df in another order than df: the client aligns it by unique_id and ds
    return pd.concat(history, ignore_index=True), pd.concat(future[::-1], ignore_index=True)


def own_forecast(server: Server, key: str, history: pd.DataFrame, future_price: list[float], confidence: float,
                 covariates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """POST /forecast's answer for the series with the price known ahead and the load past-only, or with
    ``covariates`` as given."""
    covariates = covariates or [{"name": "price", "history": history["price"].tolist(), "future": future_price},
                                {"name": "load", "history": history["load"].tolist()}]
    body = {"series": [{"timestamps": history["ds"].dt.strftime(FORMAT).tolist(), "values": history["y"].tolist(),
                        "covariates": covariates}],
            "forecast_horizon": len(future_price), "data_frequency": "Daily", "forecast_frequency": "Daily",
            "confidence": confidence}
    answer = requests.post(f"{server.url}/forecast", headers=bearer(key), json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_forecast_with_x_df_and_hist_exog_list_equals_post_forecast(served: tuple[Server, str],
                                                                    nixtla: NixtlaClient) -> None:
    server, key = served
    df, x_df = frames()
    out = nixtla.forecast(df, h=H, freq="D", X_df=x_df, hist_exog_list=["load"], level=[80])
    assert list(out.columns) == ["unique_id", "ds", "TimeGPT", "TimeGPT-hi-80", "TimeGPT-lo-80"]
    assert len(out) == 2 * H
    for uid, part in df.groupby("unique_id"):
        mine = out[out["unique_id"] == uid]
        future = x_df[x_df["unique_id"] == uid]
        ours = own_forecast(server, key, part, future["price"].tolist(), 0.8)
        assert ours["covariates"]["used"] is True, ours["covariates"]
        assert mine["TimeGPT"].tolist() == ours["median"]
        assert mine["TimeGPT-lo-80"].tolist() == ours["lower_bound"]
        assert mine["TimeGPT-hi-80"].tolist() == ours["upper_bound"]
        assert mine["ds"].dt.strftime(FORMAT).tolist() == ours["forecast_timestamps"] == \
            future["ds"].dt.strftime(FORMAT).tolist()
    # The client ignores (with a warning) a column of df in neither X_df nor hist_exog_list: the same answer.
    noisy = nixtla.forecast(df.assign(junk=1.5), h=H, freq="D", X_df=x_df, hist_exog_list=["load"], level=[80])
    pd.testing.assert_frame_equal(noisy, out)
    # The future values are read: a price two units higher lifts every step (y moves 12 per unit).
    higher = nixtla.forecast(df, h=H, freq="D", X_df=x_df.assign(price=x_df["price"] + 2),
                             hist_exog_list=["load"])
    lifted = higher["TimeGPT"].to_numpy() - out["TimeGPT"].to_numpy()
    assert (lifted > 15).all(), lifted


def test_date_features_with_country_holidays(nixtla: NixtlaClient) -> None:
    """The client computes one column per US holiday over the history and the horizon; the forecast sees the
    holiday in its horizon, as the history taught it (each holiday a dip of 30)."""
    ds = pd.date_range("2021-01-04", "2024-06-27", freq="D")
    us = holidays.country_holidays("US", years=range(2021, 2025))
    y = [round(100 + 6 * (stamp.dayofweek >= 5) - 30 * (stamp.date() in us) + (i * 7 % 5) * 0.5, 2)
         for i, stamp in enumerate(ds)]
    df = pd.DataFrame({"unique_id": "visits", "ds": ds, "y": y})
    out = nixtla.forecast(df, h=10, freq="D", date_features=[CountryHolidays(["US"])], level=[90])
    assert list(out.columns) == ["unique_id", "ds", "TimeGPT", "TimeGPT-hi-90", "TimeGPT-lo-90"]
    assert out["ds"].tolist() == list(pd.date_range("2024-06-28", periods=10, freq="D"))
    independence = out.set_index("ds")["TimeGPT"]
    others = independence.drop(pd.Timestamp("2024-07-04"))
    assert independence[pd.Timestamp("2024-07-04")] < others.min() - 15, independence
    # Without the holidays, nothing marks the 4th of July.
    plain = nixtla.forecast(df, h=10, freq="D").set_index("ds")["TimeGPT"]
    assert plain[pd.Timestamp("2024-07-04")] > plain.drop(pd.Timestamp("2024-07-04")).min() - 15


def test_date_features_with_special_dates(nixtla: NixtlaClient) -> None:
    """SpecialDates: a column per named list of dates, known ahead; sales days lift the series by 25."""
    ds = pd.date_range("2023-01-02", periods=300, freq="D")
    sales = [str(day.date()) for day in pd.date_range("2023-01-10", "2023-12-31", freq="19D")]
    y = [round(60 + 4 * (stamp.dayofweek >= 5) + 25 * (str(stamp.date()) in sales) + (i * 7 % 5) * 0.5, 2)
         for i, stamp in enumerate(ds)]
    df = pd.DataFrame({"unique_id": "store", "ds": ds, "y": y})
    out = nixtla.forecast(df, h=14, freq="D", date_features=[SpecialDates({"sale": sales})])
    by_day = out.set_index("ds")["TimeGPT"]
    sale_days = [day for day in by_day.index if str(day.date()) in sales]
    assert len(sale_days) == 1, sale_days  # 2023-11-10, in the horizon of 2023-10-29 to 2023-11-11
    assert by_day[sale_days[0]] > by_day.drop(sale_days).max() + 10, by_day


def test_cross_validation_with_exogenous_columns_equals_post_forecast_per_window(
        served: tuple[Server, str], nixtla: NixtlaClient) -> None:
    """Each window forecasts from the rows before its cutoff, with the price's actual values over its horizon
    (known ahead) and the load (past-only) over its history."""
    server, key = served
    df, _ = frames()
    out = nixtla.cross_validation(df, h=H, freq="D", n_windows=2, hist_exog_list=["load"], level=[90])
    assert list(out.columns) == ["unique_id", "ds", "cutoff", "y", "TimeGPT", "TimeGPT-hi-90", "TimeGPT-lo-90"]
    assert len(out) == 2 * 2 * H
    for (uid, cutoff), window in out.groupby(["unique_id", "cutoff"]):
        part = df[df["unique_id"] == uid]
        history = part[part["ds"] <= cutoff]
        ahead = part[part["ds"].isin(window["ds"])]
        ours = own_forecast(server, key, history, ahead["price"].tolist(), 0.9)
        assert window["TimeGPT"].tolist() == ours["median"]
        assert window["TimeGPT-lo-90"].tolist() == ours["lower_bound"]
        assert window["TimeGPT-hi-90"].tolist() == ours["upper_bound"]
        assert window["y"].tolist() == ahead["y"].tolist()


def test_add_history_with_exogenous_columns(served: tuple[Server, str], nixtla: NixtlaClient) -> None:
    """The client's in-sample call (cross-validation with full_history, X_df's columns known ahead, the rest
    named in hist_exog): one window of min(100, length - 1) points ending with the series."""
    server, key = served
    df, x_df = frames(1)
    out = nixtla.forecast(df, h=H, freq="D", X_df=x_df, hist_exog_list=["load"], add_history=True)
    assert list(out.columns) == ["unique_id", "ds", "TimeGPT"] and len(out) == 100 + H
    in_sample = out.iloc[:100]
    history, window = df.iloc[:DAYS - 100], df.iloc[DAYS - 100:]
    assert in_sample["ds"].tolist() == window["ds"].tolist()
    ours = own_forecast(server, key, history, window["price"].tolist(), 0.95)
    assert in_sample["TimeGPT"].tolist() == ours["median"]


def promotions(df: pd.DataFrame, x_df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A categorical promotion (three kinds) lifting y, known ahead."""
    kinds = np.array(["none", "radio", "tv"])
    df = df.assign(promo=kinds[(df.index.to_numpy() * 5 // 7) % 3])
    df = df.assign(y=(df["y"] + df["promo"].map({"none": 0.0, "radio": 6.0, "tv": 15.0})).round(2))
    return df, x_df.assign(promo=kinds[np.arange(len(x_df)) % 3])


def test_categorical_exog_list_is_one_hot_as_post_forecast_does(served: tuple[Server, str],
                                                                  nixtla: NixtlaClient) -> None:
    server, key = served
    df, x_df = promotions(*frames())
    out = nixtla.forecast(df, h=H, freq="D", X_df=x_df, hist_exog_list=["load"], categorical_exog_list=["promo"],
                          level=[80])
    assert list(out.columns) == ["unique_id", "ds", "TimeGPT", "TimeGPT-hi-80", "TimeGPT-lo-80"]
    for uid, part in df.groupby("unique_id"):
        future = x_df[x_df["unique_id"] == uid]
        ours = own_forecast(server, key, part, future["price"].tolist(), 0.8, [
            {"name": "price", "history": part["price"].tolist(), "future": future["price"].tolist()},
            {"name": "promo", "history": part["promo"].tolist(), "future": future["promo"].tolist()},
            {"name": "load", "history": part["load"].tolist()}])
        assert ours["covariates"]["names"] == ["price", "promo=radio", "promo=tv", "load"]
        assert out[out["unique_id"] == uid]["TimeGPT"].tolist() == ours["median"]
    # cross-validation sends the categories as known ahead: each window reads the actual ones
    windows = nixtla.cross_validation(df, h=H, freq="D", n_windows=1, hist_exog_list=["load"],
                                      categorical_exog_list=["promo"])
    for (uid, cutoff), window in windows.groupby(["unique_id", "cutoff"]):
        part = df[df["unique_id"] == uid]
        history, ahead = part[part["ds"] <= cutoff], part[part["ds"].isin(window["ds"])]
        ours = own_forecast(server, key, history, ahead["price"].tolist(), 0.95, [
            {"name": "price", "history": history["price"].tolist(), "future": ahead["price"].tolist()},
            {"name": "load", "history": history["load"].tolist()},
            {"name": "promo", "history": history["promo"].tolist(), "future": ahead["promo"].tolist()}])
        assert window["TimeGPT"].tolist() == ours["median"]


def test_bad_exogenous_input_is_a_clear_error(nixtla: NixtlaClient) -> None:
    df, x_df = frames()
    holes = df.copy()
    holes.loc[DAYS + 10, "load"] = np.nan
    with pytest.raises(ApiError) as caught:
        nixtla.forecast(holes, h=H, freq="D", X_df=x_df, hist_exog_list=["load"])
    assert caught.value.status_code == 400
    assert "series.X[1] holds null (NaN) for series 1, row 10" in caught.value.body["detail"]

    wide = df.assign(**{f"extra_{n}": float(n) for n in range(20)})
    wide_future = x_df.assign(**{f"extra_{n}": float(n) for n in range(20)})
    with pytest.raises(ApiError) as caught:
        nixtla.forecast(wide, h=H, freq="D", X_df=wide_future)
    assert caught.value.status_code == 400 and caught.value.body["code"] == "TOO_MANY_COVARIATES"
    assert "at most 20 exogenous columns; this one sends 21" in caught.value.body["detail"]

    with pytest.raises(ApiError) as caught:
        nixtla.forecast(df, h=H, freq="D", X_df=x_df, hist_exog_list=["load"], feature_contributions=True)
    assert caught.value.status_code == 400 and caught.value.body["code"] == "UNSUPPORTED_FEATURE"

    # What the client refuses itself before sending: X_df without a row of the horizon.
    with pytest.raises(ValueError, match="exactly one row for every future"):
        nixtla.forecast(df, h=H, freq="D", X_df=x_df.iloc[1:], hist_exog_list=["load"])
