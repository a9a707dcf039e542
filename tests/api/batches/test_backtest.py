"""Backtest batches in-process (Huey's immediate mode runs the real task code here): each window is POST
/forecast's answer for the history up to its cut-off, the CSV and the summary carry them, and bad requests
are refused before anything is stored."""

from __future__ import annotations

import csv
import io
import json
import math
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.batches import store
from tests.support import bearer, immediate_app, new_key, services_of

FIELDS = {"forecast_horizon": 3, "data_frequency": "Monthly", "forecast_frequency": "Monthly"}
MODELS = ["forecast-model-1", "forecast-model-2"]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with immediate_app(tmp_path_factory.mktemp("backtest"), batch_max_series=20, batch_chunk_series=2,
                       max_body_bytes=256 * 1024) as application:
        yield application


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def account(app: Flask) -> tuple[str, str]:
    account_id = "acct-" + uuid.uuid4().hex[:12]
    return new_key(app, ("read", "write", "delete"), account_id=account_id)[0], account_id


def monthly(count: int, level: float) -> dict[str, list[Any]]:
    stamps = [datetime(2015 + (i // 12), 1 + i % 12, 1).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)]
    values = [round(level + 5 * math.sin(2 * math.pi * i / 12) + 0.3 * i + (i * 7 % 5), 2) for i in range(count)]
    return {"timestamps": stamps, "values": values}


def backtest_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "backtest", "series": [{"id": f"s{i}", **monthly(40 + 3 * i, 50.0 + 10 * i)}
                                                           for i in range(2)],
                            **FIELDS, "n_windows": 3, "step_size": 2, "models": MODELS}
    body.update(changes)
    return body


def lines(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.get_data(as_text=True).splitlines()]


def test_each_window_is_post_forecast_for_the_history_up_to_its_cutoff(client: FlaskClient,
                                                                      account: tuple[str, str]) -> None:
    key = account[0]
    body = backtest_body()
    submitted = client.post("/batches", json=body, headers=bearer(key))
    assert submitted.status_code == 202, submitted.get_data(as_text=True)
    batch = submitted.get_json()
    assert batch["kind"] == "backtest" and batch["model_id"] == MODELS[0]
    assert batch["parameters"]["n_windows"] == 3 and batch["parameters"]["models"] == MODELS
    status = client.get(f"/batches/{batch['id']}", headers=bearer(key)).get_json()
    assert status["status"] == "done" and status["progress"] == {"total": 2, "done": 2, "failed": 0}

    rows = lines(client.get(f"/batches/{batch['id']}/results", headers=bearer(key)))
    assert [row["id"] for row in rows] == ["s0", "s1"]
    for row, series in zip(rows, body["series"], strict=True):
        length = len(series["values"])
        assert [w["cutoff"] for w in row["windows"]] == [series["timestamps"][c - 1]
                                                         for c in (length - 3 - 4, length - 3 - 2, length - 3)]
    assert_windows_are_post_forecast(client, key, body, rows)


def assert_windows_are_post_forecast(client: FlaskClient, key: str, body: dict[str, Any],
                                     rows: list[dict[str, Any]]) -> None:
    horizon = body["forecast_horizon"]
    fields = {name: body[name] for name in FIELDS}
    for row, series in zip(rows, body["series"], strict=True):
        assert len(row["windows"]) == body["n_windows"]
        for window in row["windows"]:
            cut = series["timestamps"].index(window["cutoff"]) + 1
            assert window["actual"] == series["values"][cut:cut + horizon]
            for model_id in body["models"]:
                single = client.post("/forecast", headers={**bearer(key), "X-Model-Id": model_id}, json={
                    "series": [{"timestamps": series["timestamps"][:cut], "values": series["values"][:cut]}],
                    **fields})
                assert single.status_code == 200
                answer = single.get_json()
                assert window["timestamps"] == answer["forecast_timestamps"]
                forecast = window["forecasts"][model_id]
                assert forecast["median"] == answer["median"]
                assert forecast["lower"] == answer["lower_bound"] and forecast["upper"] == answer["upper_bound"]


def test_windows_of_long_seasonal_histories_are_post_forecast_too(client: FlaskClient,
                                                                   account: tuple[str, str]) -> None:
    # Histories of 54 to 90 monthly points: model-1's whole pool (seasonal members, the Theta pair), with origins
    # before and after the 60 points its recent members read, so some of them are fitted once for two names.
    key = account[0]
    body = backtest_body(forecast_horizon=12, n_windows=2, step_size=8, series=[
        {"id": "long", **monthly(110, 80.0)}, {"id": "mid", **monthly(74, 40.0)}])
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["status"] == "done"
    rows = lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))
    assert [row["id"] for row in rows] == ["long", "mid"] and not any("error" in row for row in rows)
    assert_windows_are_post_forecast(client, key, body, rows)


def _smape(actual: list[float], forecast: list[float]) -> float:
    return sum(200 * abs(a - f) / (abs(a) + abs(f)) for a, f in zip(actual, forecast, strict=True)) / len(actual)


def test_csv_results_and_the_summary(client: FlaskClient, account: tuple[str, str]) -> None:
    key = account[0]
    body = backtest_body()
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    text = client.get(f"/batches/{batch_id}/results?format=csv", headers=bearer(key)).get_data(as_text=True)
    table = list(csv.DictReader(io.StringIO(text)))
    assert list(table[0]) == ["unique_id", "cutoff", "timestamp", "actual", "model", "lower", "median", "upper",
                              "error"]
    assert len(table) == 2 * 3 * 3 * len(MODELS)  # series x windows x horizon x models
    assert all(float(r["lower"]) <= float(r["median"]) <= float(r["upper"]) for r in table)

    summary = client.get(f"/batches/{batch_id}/summary", headers=bearer(key))
    assert summary.status_code == 200
    scores = summary.get_json()
    assert scores["confidence"] == 0.95 and scores["failed_series"] == 0
    assert [m["model"] for m in scores["models"]] == MODELS
    for model_id in MODELS:
        per_series = [r for r in scores["series"] if r["model"] == model_id]
        assert [r["unique_id"] for r in per_series] == ["s0", "s1"]
        for r in per_series:
            # sMAPE over the series' points, recomputed from the CSV (every window has the same length)
            mine = [row for row in table if row["unique_id"] == r["unique_id"] and row["model"] == model_id]
            expected = _smape([float(x["actual"]) for x in mine], [float(x["median"]) for x in mine])
            assert r["smape"] == pytest.approx(expected, rel=1e-9)
            assert 0 <= r["coverage"] <= 1 and r["mase"] > 0 and r["msis"] > 0
        overall = next(m for m in scores["models"] if m["model"] == model_id)
        assert overall["mase"] == pytest.approx(sum(r["mase"] for r in per_series) / 2)
        assert overall["series"]["mase"] == 2

    forecast_batch = client.post("/batches", headers=bearer(key), json={
        "series": [{"id": "a", **monthly(30, 5.0)}], **FIELDS}).get_json()["id"]
    assert client.get(f"/batches/{forecast_batch}/summary", headers=bearer(key)).status_code == 404


def test_a_csv_upload_gives_the_json_backtest(client: FlaskClient, account: tuple[str, str]) -> None:
    key = account[0]
    body = backtest_body()
    json_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    upload = "unique_id,timestamp,value\n" + "".join(
        f"{s['id']},{t},{v}\n" for s in body["series"] for t, v in zip(s["timestamps"], s["values"], strict=True))
    query = "kind=backtest&forecast_horizon=3&data_frequency=Monthly&forecast_frequency=Monthly&n_windows=3" \
            "&step_size=2&models=forecast-model-1,forecast-model-2"
    submitted = client.post(f"/batches?{query}", data=upload, headers={**bearer(key), "Content-Type": "text/csv"})
    assert submitted.status_code == 202, submitted.get_data(as_text=True)
    csv_id = submitted.get_json()["id"]
    assert client.get(f"/batches/{csv_id}", headers=bearer(key)).get_json()["status"] == "done"
    assert lines(client.get(f"/batches/{csv_id}/results", headers=bearer(key))) == \
        lines(client.get(f"/batches/{json_id}/results", headers=bearer(key)))


def _refused(client: FlaskClient, app: Flask, account: tuple[str, str], body: Any, status: int = 400,
             **kwargs: Any) -> dict[str, Any]:
    key, account_id = account
    before = len(store.list_batches(services_of(app).database, account_id, limit=1000))
    response = client.post("/batches", json=body, headers=bearer(key), **kwargs)
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] and error["message"]
    assert len(store.list_batches(services_of(app).database, account_id, limit=1000)) == before
    return error


def test_bad_requests_are_refused_whole_and_nothing_is_stored(client: FlaskClient, app: Flask,
                                                             account: tuple[str, str]) -> None:
    error = _refused(client, app, account, backtest_body(n_windows=0))
    assert error["details"]["field"] == "n_windows" and "between 1 and 50" in error["message"]
    error = _refused(client, app, account, backtest_body(forecast_horizon=101))
    assert error["details"]["field"] == "forecast_horizon"
    error = _refused(client, app, account, backtest_body(models=["forecast-model-1", "timegpt-1"]))
    assert error["details"]["field"] == "models[1]" and "Must be one of" in error["details"]["issue"]
    error = _refused(client, app, account, backtest_body(models=MODELS + MODELS[:1]))
    assert error["details"]["field"] == "models"
    short = backtest_body()
    short["series"][1] = {"id": "s1", **monthly(16, 3.0)}  # 10 + 3 + 2 * 2 = 17 points needed
    error = _refused(client, app, account, short)
    assert error["details"] == {"field": "series[1].values", "provided": "16 points", "minimum": 17,
                                "issue": "too short for the backtest's windows (at least 17 points)"}
    error = _refused(client, app, account, backtest_body(n_windows=None))
    assert error["details"]["field"] == "n_windows"
    key = account[0]
    big = client.post("/batches", data=b'{"kind":"backtest","pad":"' + b"x" * 300_000 + b'"}',
                      headers={**bearer(key), "Content-Type": "application/json"})
    assert big.status_code == 413 and big.get_json()["error"]["code"]


def test_bad_series_data_is_that_series_error_as_post_forecast_words_it(client: FlaskClient,
                                                                        account: tuple[str, str]) -> None:
    key = account[0]
    body = backtest_body()
    duplicated = monthly(40, 20.0)
    duplicated["timestamps"][20] = duplicated["timestamps"][19]
    mixed = monthly(40, 20.0)
    mixed["timestamps"] = [(datetime(2020, 1, 1) + timedelta(days=d)).strftime("%Y-%m-%dT%H:%M:%S")
                           for d in range(20)] + mixed["timestamps"][20:]
    body["series"] = [body["series"][0], {"id": "dup", **duplicated}, {"id": "mixed", **mixed}]
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    status = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert status["progress"] == {"total": 3, "done": 1, "failed": 2}
    rows = {row["id"]: row for row in lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))}
    for name, index in (("dup", 1), ("mixed", 2)):
        error = rows[name]["error"]
        single = client.post("/forecast", headers=bearer(key), json={
            "series": [{"timestamps": body["series"][index]["timestamps"],
                        "values": body["series"][index]["values"]}], **FIELDS})
        assert single.status_code == 422
        expected = single.get_json()["error"]
        assert error["code"] == expected["code"] and error["message"] == expected["message"]
        assert error["details"]["field"].startswith(f"series[{index}]")
    summary = client.get(f"/batches/{batch_id}/summary", headers=bearer(key)).get_json()
    assert summary["failed_series"] == 2 and {r["unique_id"] for r in summary["series"]} == {"s0"}
