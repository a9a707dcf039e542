"""forecast_client's batch helpers that do no I/O: the frame to the upload's CSV, the results' CSV back, polling."""

from __future__ import annotations

import copy
import io
import json
import pickle

import httpx
import numpy as np
import pandas as pd
import pytest
from forecast_client import Client
from forecast_client._batches import (
    POLL_FIRST,
    POLL_MAX,
    Batch,
    ProgressBar,
    _in_time_order,
    _service_times,
    csv_pieces,
    next_poll,
    prepare_frame,
    read_backtest_csv,
    read_forecast_csv,
)


def frame(tz: str | None = None) -> pd.DataFrame:
    stamps = pd.date_range("2026-03-28", periods=4, freq="D", tz=tz)
    return pd.DataFrame({"unique_id": [7] * 4 + [8] * 4, "timestamp": list(stamps) * 2,
                         "value": [1.0, 0.1 + 0.2, np.nan, 4.0, 5.0, 6.0, 7.0, 1e-300]})


def test_the_upload_is_the_service_csv_in_pieces_with_exact_numbers_and_empty_missing_cells() -> None:
    prepared = prepare_frame(frame(), None, "unique_id", "timestamp", "value")
    assert prepared.frequency == "Daily" and prepared.ids == {"7": 7, "8": 8}
    pieces = list(csv_pieces(prepared, rows=3))
    assert len(pieces) == 1 + 3  # the header, then 8 rows 3 at a time
    text = b"".join(pieces).decode()
    assert text.splitlines()[:4] == ["unique_id,timestamp,value", "7,2026-03-28T00:00:00,1.0",
                                     "7,2026-03-29T00:00:00,0.30000000000000004", "7,2026-03-30T00:00:00,"]
    assert text.splitlines()[-1] == "8,2026-03-31T00:00:00,1e-300"


@pytest.mark.parametrize("tz", [None, "Europe/Berlin"])
def test_the_upload_is_byte_for_byte_what_pandas_to_csv_writes(tz: str | None) -> None:
    rng = np.random.default_rng(3)
    ids = ["plain", "with,comma", 'with"quote', "with\nbreak", "ünï", 12]
    values = np.concatenate([rng.normal(0, 1e3, 200), [0.0, -0.0, 1e16, 1e-5, 123456789.0, 2.5e-300, 1.7e308,
                                                        -1e-7, np.nan, 0.1 + 0.2, 1 / 3, 99999999999999.98]])
    stamps = pd.date_range("2026-03-27 22:30", periods=len(values), freq="37min", tz=tz)
    stamps = stamps + pd.to_timedelta(rng.integers(0, 2, len(values)) * 250, unit="ms")  # some with a fraction
    df = pd.DataFrame({"unique_id": [ids[i % len(ids)] for i in range(len(values))], "timestamp": stamps,
                       "value": values})
    prepared = prepare_frame(df, "Minutes", "unique_id", "timestamp", "value")
    expected = prepared.frame.assign(timestamp=_service_times(prepared.frame["timestamp"])).to_csv(
        header=False, index=False, na_rep="")
    pieces = list(csv_pieces(prepared, rows=17))
    assert b"".join(pieces).decode() == "unique_id,timestamp,value\n" + expected


def test_the_time_order_check_agrees_with_pandas_on_interleaved_and_tied_rows() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        df = pd.DataFrame({"unique_id": rng.integers(0, 4, n), "timestamp": pd.to_datetime(
            np.sort(rng.integers(0, 10, n)) if rng.random() < 0.5 else rng.integers(0, 10, n), unit="D"),
            "value": 1.0})
        expected = df.groupby("unique_id", sort=False)["timestamp"].is_monotonic_increasing.all()
        assert _in_time_order(df) == bool(expected)


def test_aware_timestamps_carry_their_offset_across_a_dst_change() -> None:
    prepared = prepare_frame(frame("Europe/Berlin"), None, "unique_id", "timestamp", "value")
    stamps = [line.split(",")[1] for line in b"".join(csv_pieces(prepared)).decode().splitlines()[1:5]]
    assert stamps == ["2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00",
                      "2026-03-31T00:00:00+02:00"]


def test_rows_out_of_time_order_are_sorted_within_each_series() -> None:
    shuffled = frame().iloc[[5, 0, 3, 1, 7, 2, 4, 6]]
    prepared = prepare_frame(shuffled, None, "unique_id", "timestamp", "value")
    assert prepared.frame.groupby("unique_id")["timestamp"].is_monotonic_increasing.all()


def test_results_csv_splits_forecasts_from_errors_and_restores_ids_and_zone() -> None:
    body = io.BytesIO(
        b"unique_id,timestamp,lower,median,upper,error\n"
        b"7,2026-04-01T00:00:00+02:00,0.1,0.30000000000000004,0.5,\n"
        b'8,,,,,"{""error"":{""code"":""DATA_VALIDATION_ERROR"",""message"":""too short"",'
        b'""details"":{""field"":""series[1]""}}}"\n'
    )
    from zoneinfo import ZoneInfo

    out = read_forecast_csv(body, {"7": 7, "8": 8}, ZoneInfo("Europe/Berlin"))
    assert out["unique_id"].tolist() == [7]
    assert out["median"].tolist() == [0.1 + 0.2]  # read back exactly
    assert out["timestamp"].iloc[0] == pd.Timestamp("2026-04-01", tz="Europe/Berlin")
    errors = out.attrs["errors"]
    assert errors == ({"unique_id": 8, "code": "DATA_VALIDATION_ERROR", "message": "too short",
                       "details": {"field": "series[1]"}},)
    assert type(errors[0]["unique_id"]) is int  # the input's id, as a Python int: the attrs serialise to JSON


def test_polling_starts_soon_grows_to_a_ceiling_and_obeys_retry_after() -> None:
    delays = [next_poll(None, None)]
    for _ in range(20):
        delays.append(next_poll(delays[-1], None))
    assert delays[0] == POLL_FIRST and delays == sorted(delays) and delays[-1] == POLL_MAX
    assert next_poll(POLL_MAX, 42.0) == 42.0


def test_the_bar_draws_only_where_asked() -> None:
    batch = Batch.from_json({"id": "bat_1", "kind": "forecast", "status": "running",
                             "progress": {"total": 10, "done": 4, "failed": 1}})
    stream = io.StringIO()
    bar = ProgressBar(None, stream)  # a StringIO is not a terminal
    bar.update(batch)
    assert stream.getvalue() == ""
    bar = ProgressBar(True, stream)
    bar.update(batch)
    bar.close()
    assert "[###############...............] 5/10 series, 1 failed, running" in stream.getvalue()


def test_a_frame_without_the_named_columns_is_refused() -> None:
    with pytest.raises(ValueError, match="no column 'ds'"):
        prepare_frame(frame(), None, "unique_id", "ds", "value")


@pytest.mark.parametrize("zone", [None, "UTC", "Europe/Berlin", "Asia/Kolkata", "America/St_Johns"])
@pytest.mark.parametrize("fraction", [False, True])
def test_timestamps_are_written_as_the_service_reads_them(zone: str | None, fraction: bool) -> None:
    # The vectorised text equals what Python's own formatting gives each row: seconds, or microseconds when any
    # row has a fraction, and the zone's offset as +HH:MM (across daylight-saving changes).
    rng = np.random.default_rng(3)
    stamps = pd.Series(pd.to_datetime(rng.integers(-10**9, 2 * 10**9, 2000), unit="s"))
    if fraction:
        stamps += pd.to_timedelta(rng.integers(0, 10**6, 2000), unit="us")
    if zone:
        stamps = stamps.dt.tz_localize("UTC").dt.tz_convert(zone)
    spec = "seconds" if not fraction else "microseconds"
    expected = [t.to_pydatetime().isoformat(timespec=spec) for t in stamps]
    assert _service_times(stamps).tolist() == expected


def test_results_ids_come_back_without_the_csv_injection_apostrophe() -> None:
    body = io.BytesIO(b"unique_id,timestamp,lower,median,upper,error\n"
                      b"'-1,2026-01-01T00:00:00,1.0,2.0,3.0,\n"
                      b"''quoted,2026-01-01T00:00:00,1.0,2.0,3.0,\n"
                      b"'=x,,,,,\"{\"\"error\"\":{\"\"code\"\":\"\"DATA_VALIDATION_ERROR\"\",\"\"message\"\":\"\"m\"\"}}\"\n")
    out = read_forecast_csv(body, None, None)
    assert out["unique_id"].tolist() == ["-1", "'quoted"]
    assert [error["unique_id"] for error in out.attrs["errors"]] == ["=x"]


def _backtest(ids: tuple[str, ...], failed: str) -> pd.DataFrame:
    lines = ["unique_id,cutoff,timestamp,actual,model,lower,median,upper,error"]
    for sid in ids:
        for step in (1, 2):
            for model in ("forecast-model-1", "forecast-model-2"):
                lines.append(f"{sid},2026-01-01T00:00:00,2026-01-0{1 + step}T00:00:00,{step}.0,{model},0.5,1.5,2.5,")
    envelope = json.dumps({"error": {"code": "DATA_VALIDATION_ERROR", "message": "a gap", "details": {"index": 3}}})
    lines.append(f'{failed},,,,,,,,"{envelope.replace(chr(34), chr(34) * 2)}"')
    return read_backtest_csv(io.BytesIO("\n".join(lines).encode()), None, None, 0.95, ("unique_id", "ds", "y"))


def test_backtest_and_batch_frames_print_and_concatenate_like_any_frame() -> None:
    """pandas compares attrs when it concatenates frames, and so when it prints a frame too wide for the screen
    (two halves joined): DataFrames held there made both raise 'The truth value of a DataFrame is ambiguous'."""
    one, two = _backtest(("a", "b"), "gap"), _backtest(("c",), "short")
    summary = ({"model": "forecast-model-1", "mase": 0.9, "smape": 11.2, "coverage": 0.94, "msis": 7.8},)
    one.attrs.update(summary=summary, batch_id="bat_1")
    two.attrs.update(summary=summary, batch_id="bat_2")
    with pd.option_context("display.max_columns", 4, "display.max_rows", 4, "display.width", 80):
        assert "..." in repr(one) and "forecast-model-2-hi-95" in repr(one)
        assert "forecast-model-2-hi-95" in one._repr_html_()  # type: ignore[operator]
    both = pd.concat([one, two], ignore_index=True)
    assert both["unique_id"].tolist() == ["a"] * 2 + ["b"] * 2 + ["c"] * 2
    assert both.attrs == {}  # two batches: pandas keeps attrs only where every frame agrees
    again = pd.concat([one.iloc[:2], one.iloc[2:]])
    assert again.attrs["batch_id"] == "bat_1" and again.attrs["errors"] == one.attrs["errors"]
    assert [e["unique_id"] for e in one.attrs["errors"]] == ["gap"]
    assert pd.DataFrame(one.attrs["errors"])["code"].tolist() == ["DATA_VALIDATION_ERROR"]


def test_the_failed_series_are_shared_not_copied_and_survive_json_and_pickle() -> None:
    out = _backtest(("a",), "gap")
    errors = out.attrs["errors"]
    # pandas deep-copies attrs for every column read and every group: the records are handed on as they are.
    assert out["y"].attrs["errors"] is errors and copy.deepcopy(out).attrs["errors"] is errors
    assert [group.attrs["errors"] is errors for _, group in out.groupby("cutoff")] == [True]
    assert json.loads(json.dumps(out.attrs)) == {"errors": [{"unique_id": "gap", "code": "DATA_VALIDATION_ERROR",
                                                            "message": "a gap", "details": {"index": 3}}]}
    assert pickle.loads(pickle.dumps(out)).attrs == out.attrs


def test_the_backtest_summary_is_a_tuple_of_plain_records() -> None:
    body = {"batch_id": "bat_1", "models": [
        {"model": "forecast-model-1", "mase": 0.91, "smape": 11.2, "coverage": 0.94, "msis": None,
         "series": {"mase": 120, "smape": 120, "coverage": 120, "msis": 0}}], "series": []}
    with Client("http://service.invalid", "fk_test") as client:
        call = client._summary_call("bat_1")  # type: ignore[attr-defined]
    summary = call.read(httpx.Response(200, json=body, request=httpx.Request("GET", "http://service.invalid")))
    assert summary == ({"model": "forecast-model-1", "mase": 0.91, "smape": 11.2, "coverage": 0.94, "msis": None},)
    assert pd.DataFrame(summary).set_index("model").loc["forecast-model-1", "smape"] == 11.2
