"""forecast_client with covariates as statsforecast and TimeGPT users write them: a frame with extra columns, a
future frame X_df, hist_exog_list, holidays. Against the service itself, in this process (httpx's WSGI
transport; the batch tasks run at once in Huey's immediate mode)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator

import httpx
import numpy as np
import pandas as pd
import pytest
from flask import Flask
from forecast_client import Client, CovariateSummary
from forecast_client._batches import csv_pieces

from tests.support import build_app, new_key, services_of, settings_for

HORIZON = 7


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('ccov') / 'keys.sqlite3'}",
                                         batch_chunk_series=2))
    services_of(application).jobs.immediate = True
    yield application
    services_of(application).close()


@pytest.fixture
def client(app: Flask) -> Iterator[Client]:
    key = new_key(app, ("read", "write", "delete"), account_id="acct-" + uuid.uuid4().hex[:12])[0]
    with Client("http://service", key, transport=httpx.WSGITransport(app=app)) as connected:
        yield connected


def frames(ids: list[str], points: int = 60) -> tuple[pd.DataFrame, pd.DataFrame]:
    """statsforecast's long frames: the history with a price and a promotion, and X_df over the horizon."""
    parts, futures = [], []
    for n, uid in enumerate(ids):
        stamps = pd.date_range("2025-11-01", periods=points + HORIZON, freq="D")
        price = np.array([10 + ((i * 7 + n) % 5) for i in range(points + HORIZON)], dtype=float)
        promo = np.array(["on" if i % 4 == n % 4 else "off" for i in range(points + HORIZON)])
        y = 50 + 3 * np.sin(np.arange(points + HORIZON) / 2) - 4 * price + 2 * (promo == "on")
        whole = pd.DataFrame({"unique_id": uid, "ds": stamps, "y": y, "price": price, "promo": promo})
        parts.append(whole.iloc[:points])
        futures.append(whole.iloc[points:].drop(columns=["y"]))
    return pd.concat(parts, ignore_index=True), pd.concat(futures, ignore_index=True)


def one_series(df: pd.DataFrame, X_df: pd.DataFrame, uid: str) -> tuple[pd.DataFrame, pd.DataFrame]:  # noqa: N803
    history = df[df["unique_id"] == uid].drop(columns=["unique_id"]).set_index("ds")
    future = X_df[X_df["unique_id"] == uid].drop(columns=["unique_id"]).set_index("ds")
    return history, future


def test_forecast_takes_a_frame_with_covariates_and_a_future_frame(client: Client) -> None:
    df, X_df = frames(["a"])
    history, future = one_series(df, X_df, "a")
    result = client.forecast(history, HORIZON, X_df=future, holidays="US")
    assert isinstance(result.covariates, CovariateSummary)
    assert result.covariates.names[:2] == ["price", "promo=on"]
    assert "holiday" in result.covariates.names
    assert isinstance(result.covariates.used, bool)
    assert len(result.median) == HORIZON
    plain = client.forecast(history["y"], HORIZON)
    assert plain.covariates is None


def test_a_past_only_covariate_needs_no_future_and_an_unaccounted_column_is_refused(client: Client) -> None:
    df, X_df = frames(["a"])
    history, future = one_series(df, X_df, "a")
    result = client.forecast(history, HORIZON, X_df=future[["promo"]], hist_exog_list=["price"])
    assert result.covariates is not None and result.covariates.names == ["price", "promo=on"]
    with pytest.raises(ValueError, match=r"\['price'\] are neither in X_df"):
        client.forecast(history, HORIZON, X_df=future[["promo"]])
    with pytest.raises(ValueError, match="one per step of the horizon"):
        client.forecast(history, HORIZON, X_df=future.iloc[:-1])
    with pytest.raises(ValueError, match="lacks"):
        client.forecast(history[["y", "price"]], HORIZON, X_df=future)
    with pytest.raises(ValueError, match="target column"):
        client.forecast(history.rename(columns={"y": "sales"}), HORIZON, X_df=future)
    assert client.forecast(history.rename(columns={"y": "sales"}), HORIZON, X_df=future,
                           target_col="sales").covariates is not None


def test_forecast_many_with_x_df_equals_forecast_per_series(client: Client) -> None:
    df, X_df = frames(["a", "b", "c"])
    batch = client.forecast_many(df, HORIZON, X_df=X_df, holidays={"country": "US"}, time_col="ds", value_col="y")
    assert list(pd.unique(batch["unique_id"])) == ["a", "b", "c"]
    for uid in ("a", "b", "c"):
        history, future = one_series(df, X_df, uid)
        alone = client.forecast(history, HORIZON, X_df=future, holidays="US")
        assert batch.loc[batch["unique_id"] == uid, "median"].tolist() == alone.median


def test_the_batch_upload_carries_the_future_rows_after_each_history(client: Client) -> None:
    df, X_df = frames(["a", "b"], points=12)
    from forecast_client._covariates import CovariateOptions

    options = CovariateOptions.of(X_df[["unique_id", "ds", "promo"]], hist_exog_list=["price"])
    prepared = client._prepare(df, HORIZON, None, "unique_id", "ds", "y", options)
    lines = b"".join(csv_pieces(prepared)).decode().splitlines()
    assert lines[0] == "unique_id,timestamp,value,price,promo"
    a_rows = [line for line in lines[1:] if line.startswith("a,")]
    assert len(a_rows) == 12 + HORIZON and lines[1:len(a_rows) + 1] == a_rows  # one run per series
    assert a_rows[12].split(",")[2:4] == ["", ""]  # a future row: no value, no past-only price
    assert a_rows[11].split(",")[2] != ""
    with pytest.raises(ValueError, match="needs 7 rows"):
        client._prepare(df, HORIZON, None, "unique_id", "ds", "y",
                        CovariateOptions.of(X_df.iloc[1:], hist_exog_list=None))


def test_backtest_with_covariate_columns(client: Client) -> None:
    df, X_df = frames(["a", "b"], points=60)
    whole = pd.concat([df, X_df.assign(y=50.0)], ignore_index=True).sort_values(["unique_id", "ds"])
    cv = client.backtest(whole, HORIZON, n_windows=2, time_col="ds", value_col="y", holidays="US")
    assert set(cv.columns) >= {"unique_id", "ds", "cutoff", "y", "forecast-model-1"}
    assert len(cv) == 2 * 2 * HORIZON and not cv.attrs["errors"]
    assert all(math.isfinite(row["mase"]) for row in cv.attrs["summary"])
    from forecast_client._covariates import CovariateOptions

    with pytest.raises(ValueError, match="takes no X_df"):
        client._prepare(whole, 0, None, "unique_id", "ds", "y", CovariateOptions.of(X_df))
