"""Covariates and holidays in batches and backtests (docs/batches.md, Covariates): the JSON and CSV forms, the
answers they give (each series what POST /forecast answers for it alone), and every bad input refused with a 4xx
and nothing stored. Huey's immediate mode runs the real task code in this process."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, immediate_app, new_key, services_of

HORIZON = 7
FIELDS = {"forecast_horizon": HORIZON, "data_frequency": "Daily", "forecast_frequency": "Daily"}
START = datetime(2025, 11, 1)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with immediate_app(tmp_path_factory.mktemp("bcov"), batch_max_series=20, batch_chunk_series=2) as application:
        yield application


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def key(app: Flask) -> str:
    return new_key(app, ("read", "write", "delete"), account_id="acct-" + uuid.uuid4().hex[:12])[0]


def stamps(count: int, offset: int = 0) -> list[str]:
    return [(START + timedelta(days=offset + i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)]


def driven(count: int, seed: int = 0) -> tuple[list[float], list[float]]:
    """A series driven by a price: values and the price over ``count`` + HORIZON points."""
    price = [10 + ((i * 7 + seed) % 5) for i in range(count + HORIZON)]
    values = [50 + 3 * math.sin(i / 2) - 4 * p for i, p in enumerate(price)]
    return values, price


def json_series(uid: str, count: int = 60, seed: int = 0) -> dict[str, Any]:
    values, price = driven(count, seed)
    return {"id": uid, "timestamps": stamps(count), "values": values[:count],
            "covariates": [{"name": "price", "history": price[:count], "future": price[count:]}]}


def lines(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.get_data(as_text=True).splitlines()]


def results(client: FlaskClient, key: str, batch_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/batches/{batch_id}/results", headers=bearer(key))
    assert response.status_code == 200
    return lines(response)


def batch_count(app: Flask) -> int:
    from sqlalchemy import func, select

    from app.batches.records import batches_table

    with services_of(app).database.transaction() as connection:
        return connection.scalar(select(func.count()).select_from(batches_table))


def single(client: FlaskClient, key: str, series: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = {**FIELDS, **fields, "series": [{k: v for k, v in series.items() if k != "id"}]}
    response = client.post("/forecast", json=body, headers=bearer(key))
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def csv_text(rows: list[list[Any]], header: str) -> str:
    return header + "\n" + "\n".join(",".join("" if c is None else str(c) for c in row) for row in rows) + "\n"


def csv_rows(uid: str, count: int, seed: int = 0, future: bool = True) -> list[list[Any]]:
    values, price = driven(count, seed)
    rows = [[uid, t, v, p] for t, v, p in zip(stamps(count), values[:count], price[:count], strict=True)]
    if future:
        rows += [[uid, t, None, p] for t, p in zip(stamps(HORIZON, count), price[count:], strict=True)]
    return rows


# -- JSON ---------------------------------------------------------------------------------------------------


def test_json_batch_answers_each_series_as_post_forecast_with_its_covariates(client: FlaskClient, key: str) -> None:
    series = [json_series("a"), json_series("b", seed=2)]
    holidays = {"country": "US"}
    response = client.post("/batches", json={**FIELDS, "holidays": holidays, "series": series},
                           headers=bearer(key))
    assert response.status_code == 202, response.get_json()
    found = results(client, key, response.get_json()["id"])
    for one, line in zip(series, found, strict=True):
        alone = single(client, key, one, holidays=holidays)
        assert line["median"] == alone["median"]
        assert line["covariates"] == alone["covariates"]
        assert line["covariates"]["names"][0] == "price"
        assert {"date": "2025-12-25", "name": "Christmas Day"} not in line["covariates"]["holidays_in_horizon"]


def test_json_batch_without_covariates_answers_without_the_object(client: FlaskClient, key: str) -> None:
    one = json_series("a")
    del one["covariates"]
    response = client.post("/batches", json={**FIELDS, "series": [one]}, headers=bearer(key))
    assert "covariates" not in results(client, key, response.get_json()["id"])[0]


def test_json_batch_series_with_a_bad_covariate_gets_the_422_of_post_forecast(client: FlaskClient, key: str) -> None:
    bad = json_series("bad")
    bad["covariates"][0]["future"] = bad["covariates"][0]["future"][:-1]
    response = client.post("/batches", json={**FIELDS, "series": [json_series("ok"), bad]}, headers=bearer(key))
    ok, failed = results(client, key, response.get_json()["id"])
    assert "median" in ok
    alone = client.post("/forecast", json={**FIELDS, "series": [{k: v for k, v in bad.items() if k != "id"}]},
                        headers=bearer(key)).get_json()["error"]
    assert failed["error"]["code"] == "DATA_VALIDATION_ERROR"
    assert failed["error"]["details"]["field"] == "series[1].covariates[0].future"
    assert failed["error"]["details"]["issue"] == alone["details"]["issue"]


@pytest.mark.parametrize(("change", "field"), [
    (lambda body: body["series"][0]["covariates"][0].pop("name"), "series[0].covariates[0].name"),
    (lambda body: body.update(holidays={"country": "US", "windw": 2}), "holidays.windw"),
    (lambda body: body.update(hist_exog_list=["price"]), "series[0].covariates[0].future"),
    (lambda body: body.update(categorical_exog_list=["nope"]), "categorical_exog_list"),
    (lambda body: body.update(hist_exog_list="price"), "hist_exog_list"),
])
def test_json_batch_with_a_bad_covariate_shape_is_refused_whole(app: Flask, client: FlaskClient, key: str,
                                                                 change: Any, field: str) -> None:
    body = {**FIELDS, "series": [json_series("a")]}
    change(body)
    before = batch_count(app)
    response = client.post("/batches", json=body, headers=bearer(key))
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"]["details"]["field"] == field
    assert batch_count(app) == before


def test_json_backtest_takes_each_windows_actual_covariates(client: FlaskClient, key: str) -> None:
    values, price = driven(60)
    series = {"id": "a", "timestamps": stamps(67), "values": values,
              "covariates": [{"name": "price", "history": price}]}
    body = {**FIELDS, "kind": "backtest", "n_windows": 2, "series": [series]}
    response = client.post("/batches", json=body, headers=bearer(key))
    assert response.status_code == 202, response.get_json()
    line = results(client, key, response.get_json()["id"])[0]
    last = line["windows"][-1]
    forecast = last["forecasts"]["forecast-model-1"]
    # The last window is POST /forecast for the history up to its cut-off with the actual future prices.
    cut = 60
    alone = single(client, key, {"timestamps": stamps(cut), "values": values[:cut],
                                 "covariates": [{"name": "price", "history": price[:cut], "future": price[cut:]}]})
    assert forecast["median"] == alone["median"]
    assert forecast["covariates"] == alone["covariates"]


def test_json_backtest_covariate_with_future_is_refused(client: FlaskClient, key: str) -> None:
    body = {**FIELDS, "kind": "backtest", "n_windows": 1, "series": [json_series("a")]}
    response = client.post("/batches", json=body, headers=bearer(key))
    assert response.status_code == 400
    assert response.get_json()["error"]["details"]["field"] == "series[0].covariates[0].future"


# -- CSV ----------------------------------------------------------------------------------------------------


def post_csv(client: FlaskClient, key: str, text: str, **query: Any) -> Any:
    params = {name: value for name, value in {**FIELDS, **query}.items() if value is not None}
    return client.post("/batches", query_string=params, data=text.encode(),
                       headers={**bearer(key), "Content-Type": "text/csv"})


def test_csv_with_covariate_columns_and_future_rows_answers_as_json(client: FlaskClient, key: str) -> None:
    rows = csv_rows("a", 60) + csv_rows("b", 60, seed=2)
    response = post_csv(client, key, csv_text(rows, "unique_id,ds,y,price"), holidays_country="US",
                        calendar_features="day_of_week")
    assert response.status_code == 202, response.get_json()
    batch = response.get_json()
    assert batch["parameters"]["holidays"] == {"country": "US"}
    found = results(client, key, batch["id"])
    for line, one in zip(found, [json_series("a"), json_series("b", seed=2)], strict=True):
        alone = single(client, key, one, holidays={"country": "US"}, calendar_features=["day_of_week"])
        assert line["median"] == alone["median"], line
        assert line["covariates"] == alone["covariates"]
        assert line["forecast_timestamps"] == stamps(HORIZON, 60)


def test_csv_past_only_and_categorical_columns(client: FlaskClient, key: str) -> None:
    values, price = driven(60)
    promo = ["on" if i % 4 == 0 else "off" for i in range(67)]
    rows = [["a", t, values[i], price[i], promo[i]] for i, t in enumerate(stamps(60))]
    rows += [["a", t, None, None, promo[60 + i]] for i, t in enumerate(stamps(HORIZON, 60))]
    response = post_csv(client, key, csv_text(rows, "unique_id,timestamp,value,price,promo"),
                        hist_exog_list="price")
    assert response.status_code == 202, response.get_json()
    line = results(client, key, response.get_json()["id"])[0]
    alone = single(client, key, {"timestamps": stamps(60), "values": values[:60], "covariates": [
        {"name": "price", "history": price[:60]},
        {"name": "promo", "history": promo[:60], "future": promo[60:]}]})
    assert line["median"] == alone["median"]
    assert line["covariates"]["names"] == ["price", "promo=on"]


def test_csv_categorical_exog_list_takes_numbers_as_categories(client: FlaskClient, key: str) -> None:
    rows = [[*row, i % 3] for i, row in enumerate(csv_rows("a", 60))]
    response = post_csv(client, key, csv_text(rows, "unique_id,timestamp,value,price,store"),
                        categorical_exog_list="store")
    line = results(client, key, response.get_json()["id"])[0]
    assert line["covariates"]["names"] == ["price", "store=1", "store=2"], line


@pytest.mark.parametrize(("rows", "issue"), [
    (lambda: [r if i != 20 else [*r[:3], ""] for i, r in enumerate(csv_rows("a", 60))], "missing covariate value"),
    (lambda: [r if i != 20 else [*r[:3], "cheap"] for i, r in enumerate(csv_rows("a", 60))], "not a number"),
    (lambda: csv_rows("a", 60)[:-1], "a future row must leave value empty"),
    (lambda: [r if i != 62 else [*r[:2], 5.0, r[3]] for i, r in enumerate(csv_rows("a", 60))],
     "a future row must leave value empty"),
    (lambda: [r if i != 63 else [r[0], "2026-03-01T00:00:00", *r[2:]] for i, r in enumerate(csv_rows("a", 60))],
     "future rows"),
])
def test_csv_series_with_a_bad_cell_gets_its_own_422(client: FlaskClient, key: str, rows: Any, issue: str) -> None:
    text = csv_text(rows() + csv_rows("b", 60), "unique_id,timestamp,value,price")
    response = post_csv(client, key, text)
    assert response.status_code == 202
    bad, good = results(client, key, response.get_json()["id"])
    assert bad["error"]["code"] == "DATA_VALIDATION_ERROR", bad
    assert issue in bad["error"]["details"]["issue"]
    assert "median" in good


@pytest.mark.parametrize(("header", "query", "field"), [
    ("unique_id,timestamp,value,price,price", {}, "header"),
    ("unique_id,timestamp,value,y", {}, "header"),
    ("unique_id,timestamp,value," + ",".join(f"c{i}" for i in range(21)), {}, "header"),
    ("unique_id,timestamp,value,price", {"hist_exog_list": "cost"}, "hist_exog_list"),
    ("unique_id,timestamp,value,price", {"holidays_country": "XX"}, "holidays.country"),
    ("unique_id,timestamp,value,price", {"holidays_country": "US", "holidays_window": "9"}, "holidays.window"),
    ("unique_id,timestamp,value,price", {"calendar_features": "weekday"}, "calendar_features"),
])
def test_csv_with_a_bad_header_or_field_is_refused_whole(app: Flask, client: FlaskClient, key: str, header: str,
                                                         query: dict[str, str], field: str) -> None:
    width = header.count(",") + 1
    rows = [[*row, *[1] * (width - 4)] for row in csv_rows("a", 60)]
    before = batch_count(app)
    response = post_csv(client, key, csv_text(rows, header), **query)
    assert 400 <= response.status_code < 500, response.get_json()
    assert response.get_json()["error"]["details"]["field"].startswith(field), response.get_json()
    assert batch_count(app) == before


def test_csv_backtest_windows_take_the_actual_covariates(client: FlaskClient, key: str) -> None:
    rows = csv_rows("a", 67, future=False)
    response = post_csv(client, key, csv_text(rows, "unique_id,timestamp,value,price"), kind="backtest",
                        n_windows=2)
    assert response.status_code == 202, response.get_json()
    line = results(client, key, response.get_json()["id"])[0]
    values, price = driven(67)
    cut = 60
    alone = single(client, key, {"timestamps": stamps(cut), "values": values[:cut],
                                 "covariates": [{"name": "price", "history": price[:cut],
                                                 "future": price[cut:cut + HORIZON]}]})
    assert line["windows"][-1]["forecasts"]["forecast-model-1"]["median"] == alone["median"]
    summary = client.get(f"/batches/{response.get_json()['id']}/summary", headers=bearer(key)).get_json()
    assert summary["models"][0]["series"]["mase"] == 1


def test_an_anomaly_csv_with_a_further_column_is_refused(app: Flask, client: FlaskClient, key: str) -> None:
    before = batch_count(app)
    response = post_csv(client, key, csv_text(csv_rows("a", 60, future=False), "unique_id,timestamp,value,price"),
                        kind="anomalies", forecast_horizon=None, forecast_frequency=None)
    assert response.status_code == 400
    assert "anomaly batch takes no covariate columns" in response.get_json()["error"]["details"]["issue"]
    assert batch_count(app) == before


def test_interleaved_csv_rows_with_covariates_answer_as_grouped_ones(client: FlaskClient, key: str) -> None:
    a, b = csv_rows("a", 60), csv_rows("b", 60, seed=2)
    grouped = post_csv(client, key, csv_text(a + b, "unique_id,timestamp,value,price"))
    mixed = [row for pair in zip(a, b, strict=True) for row in pair]
    interleaved = post_csv(client, key, csv_text(mixed, "unique_id,timestamp,value,price"))
    assert results(client, key, grouped.get_json()["id"]) == results(client, key, interleaved.get_json()["id"])


def test_json_categorical_exog_list_takes_numbers_as_categories(client: FlaskClient, key: str) -> None:
    one = json_series("a")
    store = [i % 3 for i in range(60 + HORIZON)]
    one["covariates"].append({"name": "store", "history": store[:60], "future": [float(s) for s in store[60:]]})
    response = client.post("/batches", json={**FIELDS, "categorical_exog_list": ["store"], "series": [one]},
                           headers=bearer(key))
    line = results(client, key, response.get_json()["id"])[0]
    assert line["covariates"]["names"] == ["price", "store=1", "store=2"], line
