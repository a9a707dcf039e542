"""forecast_client's backtest() against a real gunicorn and a real `jobs worker`: statsforecast's
cross_validation shape, each window POST /forecast's answer, the summary, and the series that fail."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from forecast_client import AsyncClient, Client

from tests.support import cli_in_process, served_with_jobs

pytestmark = pytest.mark.slow

MODELS = ["forecast-model-1", "forecast-model-2"]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    directory: Path = tmp_path_factory.mktemp("client-backtest")
    env = {"DATABASE_URL": f"sqlite:///{directory / 'batches.sqlite3'}", "FORECAST_WORKERS": "1",
           "LOG_LEVEL": "WARNING", "BATCH_CHUNK_SERIES": "2"}
    with served_with_jobs(env, directory) as (server, _):
        key = json.loads(cli_in_process("keys", "create", "--permissions", "read,write", "--per-minute", "100000",
                                        "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                        env=env).stdout)["key"]
        yield server.url, key


def monthly(ids: list[str], points: int) -> pd.DataFrame:
    parts = []
    for n, sid in enumerate(ids):
        t = np.arange(points)
        parts.append(pd.DataFrame({"unique_id": sid, "ds": pd.date_range("2015-01-01", periods=points, freq="MS"),
                                   "y": np.round(80 + 5 * n + 0.4 * t + 6 * np.sin(2 * np.pi * t / 12), 3)}))
    return pd.concat(parts, ignore_index=True)


def test_backtest_has_statsforecast_shape_and_post_forecast_windows(service: tuple[str, str]) -> None:
    url, key = service
    df = monthly(["a", "b"], 40)
    with Client(url, key) as client:
        cv = client.backtest(df, 4, n_windows=3, step_size=2, models=MODELS, confidence=0.9, time_col="ds",
                             value_col="y", progress=False)
        single = {model: client.forecast(df[df["unique_id"] == "b"].iloc[:40 - 4].set_index("ds")["y"], 4,
                                         frequency="Monthly", confidence=0.9, model=model) for model in MODELS}

    from statsforecast import StatsForecast
    from statsforecast.models import Naive

    reference = StatsForecast(models=[Naive()], freq="MS").cross_validation(df=df, h=4, n_windows=3, step_size=2,
                                                                             level=[90])
    assert list(cv.columns) == ["unique_id", "ds", "cutoff", "y", "forecast-model-1", "forecast-model-1-lo-90",
                                "forecast-model-1-hi-90", "forecast-model-2", "forecast-model-2-lo-90",
                                "forecast-model-2-hi-90"]
    assert list(reference.columns)[:4] == ["unique_id", "ds", "cutoff", "y"]
    for column in ("unique_id", "ds", "cutoff", "y"):
        assert cv[column].tolist() == reference[column].tolist(), column

    last = cv[(cv["unique_id"] == "b") & (cv["cutoff"] == cv["cutoff"].max())]
    for model in MODELS:
        frame = single[model]
        assert last[model].tolist() == frame.median
        assert last[f"{model}-lo-90"].tolist() == frame.lower
        assert last[f"{model}-hi-90"].tolist() == frame.upper

    summary = pd.DataFrame(cv.attrs["summary"])
    assert summary["model"].tolist() == MODELS
    assert set(summary.columns) >= {"mase", "smape", "coverage", "msis"}
    assert cv.attrs["errors"] == () and cv.attrs["batch_id"].startswith("bat_")


def test_failed_series_are_listed_and_async_agrees(service: tuple[str, str]) -> None:
    url, key = service
    df = pd.concat([monthly(["good"], 30), monthly(["gap"], 30).drop(index=[12])], ignore_index=True)

    async def run() -> pd.DataFrame:
        async with AsyncClient(url, key) as client:
            return await client.backtest(df, 3, n_windows=2, time_col="ds", value_col="y", progress=False)

    cv = asyncio.run(run())
    assert set(cv["unique_id"]) == {"good"} and len(cv) == 2 * 3
    errors = pd.DataFrame(cv.attrs["errors"])
    assert errors["unique_id"].tolist() == ["gap"] and errors["code"].tolist() == ["DATA_VALIDATION_ERROR"]
    with Client(url, key) as client:
        again = client.backtest(df[df["unique_id"] == "good"], 3, n_windows=2, time_col="ds", value_col="y",
                                progress=False)
    pd.testing.assert_frame_equal(cv.reset_index(drop=True), again.reset_index(drop=True))


def test_backtest_frames_print_and_concatenate_like_statsforecast_frames(service: tuple[str, str],
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """print() of a frame wider than the screen and pd.concat() both compare the frames' attrs: with the summary
    and the failed series held there as DataFrames, both raised 'The truth value of a DataFrame is ambiguous'."""
    url, key = service
    with Client(url, key) as client:
        first = client.backtest(monthly(["a"], 30), 6, n_windows=2, models=MODELS, time_col="ds", value_col="y",
                                progress=False)
        second = client.backtest(monthly(["b", "c"], 30), 6, n_windows=2, models=MODELS, time_col="ds",
                                 value_col="y", progress=False)
    with pd.option_context("display.max_columns", 4, "display.width", 80):  # as narrow as a terminal
        print(first)
        print(second)
    shown = capsys.readouterr().out
    assert "forecast-model-2-hi-95" in shown and "[12 rows x 10 columns]" in shown
    both = pd.concat([first, second], ignore_index=True)
    assert both["unique_id"].tolist() == ["a"] * 12 + ["b"] * 12 + ["c"] * 12
    assert list(both.columns) == list(first.columns)
    assert first.attrs["batch_id"] != second.attrs["batch_id"] and both.attrs == {}  # pandas: only if all agree
    assert [row["model"] for row in second.attrs["summary"]] == MODELS and second.attrs["errors"] == ()
