"""forecast_client's batch calls (forecast_many and friends) against a real gunicorn and a real `jobs worker`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from forecast_client import AsyncClient, BatchFailed, BatchTimeout, Client, NotFound
from forecast_client._batches import UPLOAD_ROWS

from tests.support import JobWorker, Server, cli_in_process, served_with_jobs

pytestmark = pytest.mark.slow


@dataclass
class Running:
    server: Server
    worker: JobWorker
    key: str

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory: Path = tmp_path_factory.mktemp("client-batches")
    env = {"DATABASE_URL": f"sqlite:///{directory / 'batches.sqlite3'}", "FORECAST_WORKERS": "1",
           "LOG_LEVEL": "WARNING", "BATCH_CHUNK_SERIES": "4"}
    with served_with_jobs(env, directory, processes=2) as (server, worker):
        key = json.loads(cli_in_process("keys", "create", "--permissions", "read,write,delete", "--per-minute",
                                        "100000", "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                        env=env).stdout)["key"]
        yield Running(server, worker, key)


def long_frame(ids: list[object], points: int, *, freq: str = "D", tz: str | None = None,
               short: object | None = None) -> pd.DataFrame:
    parts = []
    for n, sid in enumerate(ids):
        size = 6 if sid == short else points
        t = np.arange(size)
        parts.append(pd.DataFrame({
            "unique_id": sid,
            "timestamp": pd.date_range("2025-01-06", periods=size, freq=freq, tz=tz),
            "value": np.round(50 + n + 0.1 * t + 5 * np.sin(2 * np.pi * t / 7) + np.cos(t * (n + 1)), 4),
        }))
    return pd.concat(parts, ignore_index=True)


def test_forecast_many_equals_forecast_per_series_and_reports_the_failed_one(running: Running) -> None:
    frame = long_frame([10, 11, 12, 13, 14, 15], 90, short=12)
    with Client(running.url, running.key) as client:
        out = client.forecast_many(frame, 5, progress=False)
        assert list(out.columns) == ["unique_id", "timestamp", "lower", "median", "upper"]
        assert out["unique_id"].tolist() == [sid for sid in (10, 11, 13, 14, 15) for _ in range(5)]  # int ids kept
        assert out.attrs["batch_id"].startswith("bat_")
        errors = pd.DataFrame(out.attrs["errors"])
        assert errors["unique_id"].tolist() == [12]
        assert errors["code"].tolist() == ["DATA_VALIDATION_ERROR"]
        assert errors["details"][0]["field"] == "series[2]"
        for sid in (10, 11, 13, 14, 15):
            rows = frame[frame["unique_id"] == sid]
            single = client.forecast(pd.Series(rows["value"].to_numpy(), index=pd.DatetimeIndex(rows["timestamp"])), 5)
            got = out[out["unique_id"] == sid]
            assert got["median"].tolist() == single.median  # the same numbers, to the last digit
            assert got["lower"].tolist() == single.lower and got["upper"].tolist() == single.upper
            assert list(got["timestamp"]) == list(single.to_pandas().index)


def test_a_time_zone_and_an_unsorted_frame_come_back_in_the_input_terms(running: Running) -> None:
    frame = long_frame(["a", "b"], 72, freq="h", tz="Europe/Berlin").sample(frac=1.0, random_state=3)
    with Client(running.url, running.key) as client:
        out = client.forecast_many(frame, 4, model="forecast-model-2", progress=False)
        assert str(out["timestamp"].dt.tz) == "Europe/Berlin"
        ordered = frame.sort_values(["unique_id", "timestamp"])
        for sid in ("a", "b"):
            rows = ordered[ordered["unique_id"] == sid]
            single = client.forecast(pd.Series(rows["value"].to_numpy(), index=pd.DatetimeIndex(rows["timestamp"])),
                                     4, model="forecast-model-2")
            got = out[out["unique_id"] == sid]
            assert got["median"].tolist() == single.median
            assert list(got["timestamp"]) == list(single.to_pandas().index)


def test_a_frame_larger_than_one_upload_piece_streams_whole(running: Running) -> None:
    points = 1000
    count = UPLOAD_ROWS // points + 7  # more rows than one piece of the streamed upload
    frame = long_frame([f"s{i}" for i in range(count)], points, freq="h")
    with Client(running.url, running.key) as client:
        out = client.forecast_many(frame, 3, model="forecast-model-2", progress=False)
    assert out["unique_id"].nunique() == count and len(out) == 3 * count
    assert out.attrs["errors"] == ()


def test_progress_bar_timeout_resume_results_list_and_cancel(running: Running,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    frame = long_frame([f"r{i}" for i in range(16)], 120)
    with Client(running.url, running.key) as client:
        with pytest.raises(BatchTimeout) as timed_out:
            client.forecast_many(frame, 3, timeout=0.0, progress=True)
        batch_id = timed_out.value.batch_id
        bar = capsys.readouterr().err
        assert f"batch {batch_id} [" in bar and "/16 series" in bar

        resumed = client.forecast_many(batch_id=batch_id, progress=True)  # no frame: ids come back as text
        assert resumed["unique_id"].unique().tolist() == [f"r{i}" for i in range(16)]
        assert "16/16 series, 0 failed, done" in capsys.readouterr().err
        again = client.batch_results(batch_id)
        assert again.attrs["batch_status"] == "done"
        pd.testing.assert_frame_equal(again, resumed)
        assert batch_id in [b.id for b in client.batches()]
        assert client.batch(batch_id).done == 16

        pending = client.submit_batch(frame, 3)
        client.cancel_batch(pending.id)
        with pytest.raises(BatchFailed) as cancelled:
            client.forecast_many(batch_id=pending.id, progress=False)
        assert cancelled.value.batch.status == "cancelled"
        with pytest.raises(NotFound):
            client.batch("bat_nosuchbatch")


def test_async_client_gives_what_the_blocking_one_gives(running: Running) -> None:
    frame = long_frame(["x", "y", "z"], 60)

    async def both() -> pd.DataFrame:
        async with AsyncClient(running.url, running.key) as client:
            out = await client.forecast_many(frame, 4, progress=False)
            assert (await client.batch(out.attrs["batch_id"])).status == "done"
            return out

    from_async = asyncio.run(both())
    with Client(running.url, running.key) as client:
        from_sync = client.forecast_many(frame, 4, progress=False)
    pd.testing.assert_frame_equal(from_async, from_sync)


def test_a_frame_without_the_columns_is_refused_before_anything_is_sent(running: Running) -> None:
    with Client(running.url, running.key) as client:
        with pytest.raises(ValueError, match="no column 'value'"):
            client.forecast_many(pd.DataFrame({"unique_id": [1], "timestamp": ["2025-01-01"], "y": [1.0]}), 3)
        renamed = long_frame(["p"], 40).rename(columns={"unique_id": "id", "timestamp": "ds", "value": "y"})
        out = client.forecast_many(renamed, 2, id_col="id", time_col="ds", value_col="y", progress=False)
        assert len(out) == 2
