"""The inputs people really send, through the HTTP API in-process: timestamps with a space for the T, null for a
missing value, a CSV batch under Nixtla's header unique_id,ds,y; and what the API writes back: four-digit years,
numbers without float32 digits, a monitor's instants in one form. tests/e2e/test_batch_form_upload.py sends a CSV
batch as a multipart form upload to a real gunicorn."""

from __future__ import annotations

import io
import json
import math
import re
import tracemalloc
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.batches.multipart import FormFile
from tests.support import ROOMY_LIMITS, bearer, build_app, new_key, services_of, settings_for

DAILY = {"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    path = tmp_path_factory.mktemp("input-forms") / "keys.sqlite3"
    application = build_app(settings_for(f"sqlite:///{path}", max_points=5000, batch_chunk_series=2),
                            start_workers=True)
    services_of(application).jobs.immediate = True
    yield application
    application.extensions["monitors"].sender.stop()
    services_of(application).close()


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, ("read", "write", "delete"), account_id="acct-" + uuid.uuid4().hex[:12], **ROOMY_LIMITS)[0]


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def stamps(count: int, step: timedelta, *, sep: str = "T", suffix: str = "") -> list[str]:
    return [(datetime(2026, 6, 1) + i * step).isoformat(sep) + suffix for i in range(count)]


def wave(count: int) -> list[float]:
    return [round(20 + 4 * math.sin(i / 2) + 0.1 * i, 3) for i in range(count)]


def ok(response: Any) -> Any:
    assert response.status_code in (200, 201, 202), response.get_data(as_text=True)
    return response.get_json()


def refused(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()["error"]  # type: ignore[no-any-return]


def forecast(client: FlaskClient, key: str, timestamps: list[str], values: list[Any], **fields: Any) -> Any:
    return client.post("/forecast", headers=bearer(key),
                       json={"series": [{"timestamps": timestamps, "values": values}], **{**DAILY, **fields}})


def detect(client: FlaskClient, key: str, timestamps: list[str], values: list[Any], path: str = "/anomalies") -> Any:
    return client.post(path, headers=bearer(key), json={"series": [{"timestamps": timestamps, "values": values}],
                                                        "data_frequency": "Hours"})


def batch_results(client: FlaskClient, key: str, submitted: Any, status: str = "done") -> list[dict[str, Any]]:
    batch_id = ok(submitted)["id"]
    found = ok(client.get(f"/batches/{batch_id}", headers=bearer(key)))
    assert found["status"] == status, found
    text = client.get(f"/batches/{batch_id}/results", headers=bearer(key)).get_data(as_text=True)
    return [json.loads(line) for line in text.splitlines()]


# ---------------------------------------------------------------------------------------- a space for the T


def test_a_space_between_date_and_time_is_the_same_instant_on_every_route(client: FlaskClient, key: str) -> None:
    values = wave(30)
    for suffix in ("", "Z", "+02:00", ".250", ".5-05:00"):
        with_t = stamps(30, timedelta(days=1), suffix=suffix)
        spaced = stamps(30, timedelta(days=1), sep=" ", suffix=suffix)
        plain, answer = ok(forecast(client, key, with_t, values)), ok(forecast(client, key, spaced, values))
        assert answer["median"] == plain["median"] and answer["upper_bound"] == plain["upper_bound"]
        # Written as the series was: the same instants, a space where the input had one.
        assert answer["forecast_timestamps"] == [t.replace("T", " ") for t in plain["forecast_timestamps"]]

    hourly_t, hourly_space = stamps(40, timedelta(hours=1), suffix="Z"), stamps(40, timedelta(hours=1), sep=" ",
                                                                                   suffix="Z")
    for path in ("/anomalies", "/anomalies/last"):
        plain = ok(detect(client, key, hourly_t, wave(40), path))
        spaced = ok(detect(client, key, hourly_space, wave(40), path))
        assert {k: v for k, v in spaced.items() if not k.startswith("timestamp")} == {
            k: v for k, v in plain.items() if not k.startswith("timestamp")}
    # A series may mix the two spellings: they are one form.
    mixed = [t if i % 2 else t.replace("T", " ") for i, t in enumerate(hourly_t)]
    assert ok(detect(client, key, mixed, wave(40)))["expected"] == ok(detect(client, key, hourly_t, wave(40)))[
        "expected"]

    body = {"series": [{"id": "spaced", "timestamps": stamps(30, timedelta(days=1), sep=" "), "values": values}],
            **DAILY}
    [row] = batch_results(client, key, client.post("/batches", json=body, headers=bearer(key)))
    assert row["median"] == ok(forecast(client, key, stamps(30, timedelta(days=1)), values))["median"]


# ---------------------------------------------------------------------------------------- null is missing


def test_a_null_value_is_a_missing_one_and_the_answer_counts_them(client: FlaskClient, key: str) -> None:
    days, values = stamps(30, timedelta(days=1)), wave(30)
    holed = list(values)
    holed[4] = holed[17] = None
    answer = ok(forecast(client, key, days, holed))
    assert answer["missing_values"] == 2
    assert answer["forecast_timestamps"] == ok(forecast(client, key, days, values))["forecast_timestamps"]
    # The values that are there, forecast as a monitor forecasts its stored points over a hole.
    kept = [v for v in holed if v is not None]
    assert answer["median"] == ok(forecast(client, key, stamps(28, timedelta(days=1)), kept))["median"]
    assert "missing_values" not in ok(forecast(client, key, days, values))

    hours, series = stamps(40, timedelta(hours=1)), wave(40)
    holed = list(series)
    holed[10] = holed[39] = None
    gap_rows = [i for i in range(40) if i not in (10, 39)]
    with_holes = ok(detect(client, key, hours, holed))
    # Exactly the answer of the same series sent without those rows (a missing timestamp), and the count.
    without = ok(detect(client, key, [hours[i] for i in gap_rows], [series[i] for i in gap_rows]))
    assert with_holes.pop("missing_values") == 2
    assert with_holes == without
    last = ok(detect(client, key, hours, holed, "/anomalies/last"))
    assert last["timestamp"] == hours[38] and last["missing_values"] == 2

    body = {"series": [{"id": "holed", "timestamps": days, "values": [None if i == 3 else v for i, v in
                                                                      enumerate(values)]}], **DAILY}
    [row] = batch_results(client, key, client.post("/batches", json=body, headers=bearer(key)))
    assert row["missing_values"] == 1 and len(row["median"]) == 3
    # A backtest scores every point by position: a missing one fails that series, with its index.
    backtest = {**body, "kind": "backtest", "n_windows": 2, "step_size": 2}
    [row] = batch_results(client, key, client.post("/batches", json=backtest, headers=bearer(key)), "failed")
    assert row["error"]["details"]["index"] == 3 and row["error"]["details"]["issue"].startswith("missing value")


def test_a_series_of_too_few_values_is_refused_as_a_short_one(client: FlaskClient, key: str) -> None:
    days = stamps(12, timedelta(days=1))
    for values in ([None] * 12, [1.0] * 9 + [None] * 3):
        error = refused(forecast(client, key, days, values), 422)
        assert error["details"]["issue"] == "insufficient data points" and error["details"]["minimum"] == 10
        assert "null" in error["details"]["provided"]
    error = refused(detect(client, key, stamps(14, timedelta(hours=1)), [1.0] * 11 + [None] * 3), 422)
    assert error["details"]["issue"] == "insufficient data points" and error["details"]["minimum"] == 12
    # Other defects still name their index in the series as sent.
    error = refused(forecast(client, key, days, [None, *[1.0] * 10, "x"]), 422)
    assert (error["details"]["index"], error["details"]["issue"]) == (11, "value must be a number")


# ---------------------------------------------------------------------------------------- Nixtla's CSV header


def test_a_csv_batch_under_nixtlas_header_is_the_same_batch(client: FlaskClient, key: str) -> None:
    days, values = stamps(30, timedelta(days=1)), wave(30)
    rows = "".join(f"store-{n},{t},{v + n}\n" for n in range(3) for t, v in zip(days, values, strict=True))
    results = []
    for header in ("unique_id,timestamp,value", "unique_id,ds,y", "ds,y,unique_id"):
        body = rows if header != "ds,y,unique_id" else "".join(
            f"{t},{v + n},store-{n}\n" for n in range(3) for t, v in zip(days, values, strict=True))
        submitted = client.post("/batches", query_string=DAILY, data=f"{header}\n{body}",
                                headers={**bearer(key), "Content-Type": "text/csv"})
        results.append(batch_results(client, key, submitted))
    assert results[0] == results[1] == results[2] and len(results[0]) == 3 and "median" in results[0][0]


def test_form_upload_reads_its_file_part_without_holding_it() -> None:
    """FormFile hands the file on a read at a time: 64 MiB of upload through it holds a few MiB at most."""
    boundary, size = "----formboundary7MA4YWxkTrZu0gW", 64 * 1024 * 1024
    row = b"store-1,2026-06-01 00:00:00,1.5\n"

    class Upload:
        def __init__(self) -> None:
            head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"stores.csv\"\r\n"
                    f"Content-Type: text/csv\r\n\r\nunique_id,ds,y\n").encode()
            self.parts = iter([head, *[row * (1024 * 1024 // len(row))] * (size // (1024 * 1024)),
                               f"\r\n--{boundary}--\r\n".encode()])

        def read(self, _size: int) -> bytes:
            return next(self.parts, b"")

    tracemalloc.start()
    try:
        form, received = FormFile(Upload(), boundary, max_bytes=2 * size), 0
        while data := form.read(1024 * 1024):
            received += len(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert received > size
    assert peak < 8 * 1024 * 1024, peak


# ---------------------------------------------------------------------------------------- what the API writes


def test_numbers_from_float32_data_are_written_without_float64_digits(client: FlaskClient, key: str) -> None:
    level = float(np.float32(8.999999))  # 8.999999046325684, a float32 column sent as float64
    days = stamps(30, timedelta(days=1))
    answer = forecast(client, key, days, [level] * 30)
    assert "8.999999046325684" not in answer.get_data(as_text=True)
    assert ok(answer)["median"] == [8.999999] * 3
    values = [float(np.float32(v)) for v in wave(40)]
    detected = detect(client, key, stamps(40, timedelta(hours=1)), values)
    written = re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", detected.get_data(as_text=True))
    float32_noise = [text for text in written if float(np.float32(text)) == float(text) and len(text) > 12]
    assert not float32_noise, float32_noise[:5]


def test_a_monitor_writes_every_instant_in_utc_with_z_and_four_digit_years(client: FlaskClient, key: str) -> None:
    headers = bearer(key)
    created = ok(client.post("/monitors", json={"name": "forms", "data_frequency": "Minutes"}, headers=headers))
    points = f"/monitors/{created['id']}/points"
    first = ok(client.post(points, json={"timestamps": ["0001-01-01T00:00:00", "0001-01-01T00:11:00"],
                                         "values": [1, 2]}, headers=headers))
    assert first["timestamps"] == ["0001-01-01T00:00:00Z", "0001-01-01T00:11:00Z"]
    # A stored point sent again (a retry) is answered beside the new one, both in the one form.
    again = ok(client.post(points, json={"timestamps": ["0001-01-01T02:11:00+02:00", "0001-01-01T02:22:00+02:00"],
                                         "values": [2, 3]}, headers=headers))
    assert again["timestamps"] == ["0001-01-01T00:11:00Z", "0001-01-01T00:22:00Z"]
    view = ok(client.get(f"/monitors/{created['id']}?points=10", headers=headers))
    series = view["series"][0]
    assert series["first_timestamp"] == "0001-01-01T00:00:00Z"
    assert series["last_timestamp"] == series["last_point"]["timestamp"] == "0001-01-01T00:22:00Z"
    assert view["last_timestamp"] == "0001-01-01T00:22:00Z"
    instants = re.findall(r'"(\d+-\d\d-\d\dT[^"]*)"', json.dumps(view))
    assert instants and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", t) for t in instants), instants


def test_form_upload_rules_in_process(client: FlaskClient, key: str) -> None:
    days, values = stamps(30, timedelta(days=1)), wave(30)
    text = "unique_id,ds,y\n" + "".join(f"a,{t},{v}\n" for t, v in zip(days, values, strict=True))
    [row] = batch_results(client, key, client.post("/batches", query_string=DAILY, headers=bearer(key),
                                                   data={"file": (io.BytesIO(text.encode()), "stores.csv")}))
    assert row["median"] == ok(forecast(client, key, days, values))["median"]
