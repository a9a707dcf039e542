"""POST/GET/DELETE /batches in-process: the request's shape, sizes, permissions, limits and usage, and the
results of batches whose tasks Huey runs at once (its immediate mode runs the real task code in this process;
tests/e2e runs them on real worker processes)."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.batches import stored_results
from app.batches.tasks import batch_tasks, sweep_batches
from app.jobs.resources import WorkerResources
from tests.support import bearer, build_app, immediate_app, new_key, services_of, settings_for

FIELDS = {"forecast_horizon": 3, "data_frequency": "Daily", "forecast_frequency": "Daily"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with immediate_app(tmp_path_factory.mktemp("batches"), batch_max_series=20, batch_max_upload_bytes=64 * 1024,
                       batch_chunk_series=2, max_body_bytes=256 * 1024) as application:
        yield application


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def account_key(app: Flask, permissions: tuple[str, ...] = ("read", "write", "delete"),
                **kwargs: Any) -> tuple[str, str]:
    """A key of an account of its own: batches are listed per account."""
    kwargs.setdefault("account_id", "acct-" + uuid.uuid4().hex[:12])
    return new_key(app, permissions, **kwargs)


@pytest.fixture
def key(app: Flask) -> str:
    return account_key(app)[0]


def spaced(count: int, step: timedelta, level: float) -> dict[str, list[Any]]:
    start = datetime(2026, 1, 1)
    return {
        "timestamps": [(start + i * step).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)],
        "values": [level + 3 * math.sin(i / 3) + 0.1 * i for i in range(count)],
    }


def hourly(count: int, level: float = 10.0) -> dict[str, list[Any]]:
    return spaced(count, timedelta(hours=1), level)


def days(count: int, level: float = 10.0) -> dict[str, list[Any]]:
    return spaced(count, timedelta(days=1), level)


def batch_body(count: int = 3, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"series": [{"id": f"s{i}", **days(40, 10.0 + i)} for i in range(count)], **FIELDS}
    body.update(changes)
    return body


def lines(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.get_data(as_text=True).splitlines()]


def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code and error["message"]
    return error


def test_json_batch_answers_202_and_every_series_equals_post_forecast(client: FlaskClient, key: str) -> None:
    body = batch_body(3)
    submitted = client.post("/batches", json=body, headers=bearer(key))
    assert submitted.status_code == 202, submitted.get_data(as_text=True)
    batch_id = submitted.get_json()["id"]
    assert submitted.headers["Location"] == f"/batches/{batch_id}"
    assert submitted.get_json()["progress"]["total"] == 3

    status = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert status["status"] == "done" and status["progress"] == {"total": 3, "done": 3, "failed": 0}
    assert status["expires_at"] is not None and status["model_id"] == "forecast-model-1"

    results = client.get(f"/batches/{batch_id}/results", headers=bearer(key))
    assert results.mimetype == "application/x-ndjson"
    rows = lines(results)
    assert [row["id"] for row in rows] == ["s0", "s1", "s2"]
    for row, series in zip(rows, body["series"], strict=True):
        single = client.post("/forecast", json={"series": [{"timestamps": series["timestamps"],
                                                              "values": series["values"]}], **FIELDS},
                             headers=bearer(key)).get_json()
        for name in ("forecast_timestamps", "lower_bound", "median", "upper_bound"):
            assert row[name] == pytest.approx(single[name], rel=1e-12, abs=1e-12)
        assert row["forecast_timestamps"] == single["forecast_timestamps"]


def test_a_failing_series_carries_the_error_post_forecast_gives_it(client: FlaskClient, key: str) -> None:
    short = {"id": "short", "timestamps": days(5)["timestamps"], "values": [1, 2, 3, 4, 5]}
    gap = days(20)
    gap["values"][7] = "7"
    holed = {"id": "holed", **gap}
    body = batch_body(2)
    body["series"][1:1] = [short, holed]
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["progress"] == {
        "total": 4, "done": 2, "failed": 2}
    rows = lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))
    assert [row["id"] for row in rows] == ["s0", "short", "holed", "s1"]
    for index, series in ((1, short), (2, holed)):
        single = client.post("/forecast", json={"series": [{"timestamps": series["timestamps"],
                                                              "values": series["values"]}], **FIELDS},
                             headers=bearer(key))
        expected = error_of(single, 422, "DATA_VALIDATION_ERROR")
        got = rows[index]["error"]
        assert got["code"] == expected["code"] and got["message"] == expected["message"]
        # The field path names the series' place in the batch; everything else is /forecast's.
        assert got["details"]["field"] == expected["details"]["field"].replace("series[0]", f"series[{index}]")
        assert {k: v for k, v in got["details"].items() if k != "field"} == {
            k: v for k, v in expected["details"].items() if k != "field"}
    assert "median" in rows[0] and "median" in rows[3]


def test_results_as_csv_in_long_format(client: FlaskClient, key: str) -> None:
    body = batch_body(2)
    body["series"].append({"id": "short", "timestamps": days(3)["timestamps"], "values": [1, 2, 3]})
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    ndjson = lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))
    answer = client.get(f"/batches/{batch_id}/results", headers={**bearer(key), "Accept": "text/csv"})
    assert answer.mimetype == "text/csv"
    text = answer.get_data(as_text=True).splitlines()
    assert text[0] == "unique_id,timestamp,lower,median,upper,error"
    assert len(text) == 1 + 3 + 3 + 1
    first = text[1].split(",")
    assert first[0] == "s0" and first[1] == ndjson[0]["forecast_timestamps"][0]
    assert float(first[3]) == ndjson[0]["median"][0]
    assert text[-1].startswith("short,,,,,") and "insufficient data points" in text[-1]
    assert client.get(f"/batches/{batch_id}/results?format=csv", headers=bearer(key)).get_data() == answer.get_data()


def csv_of(body: dict[str, Any]) -> str:
    rows = ["unique_id,timestamp,value"]
    for series in body["series"]:
        rows += [f"{series['id']},{stamp},{'' if value is None else repr(value)}"
                 for stamp, value in zip(series["timestamps"], series["values"], strict=True)]
    return "\n".join(rows) + "\n"


def test_csv_upload_gives_the_json_batch_results(client: FlaskClient, key: str) -> None:
    body = batch_body(3)
    body["series"][1]["values"][4] = None  # an empty cell: missing value, as null in JSON
    from_json = lines(client.get(
        f"/batches/{client.post('/batches', json=body, headers=bearer(key)).get_json()['id']}/results",
        headers=bearer(key)))
    submitted = client.post("/batches?" + "&".join(f"{k}={v}" for k, v in FIELDS.items()), data=csv_of(body),
                            headers={**bearer(key), "Content-Type": "text/csv"})
    assert submitted.status_code == 202, submitted.get_data(as_text=True)
    assert submitted.get_json()["source"] == "csv" and submitted.get_json()["progress"]["total"] == 3
    batch_id = submitted.get_json()["id"]
    assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["status"] == "done"
    from_csv = lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))
    assert from_csv == from_json
    assert from_csv[1]["missing_values"] == 1


def test_anomaly_batch_gives_post_anomalies_answers(client: FlaskClient, key: str) -> None:
    series = [{"id": f"m{i}", **hourly(60, 5.0 + i)} for i in range(2)]
    series[1]["values"][40] = 500.0
    body = {"kind": "anomalies", "series": series, "data_frequency": "Hours"}
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    rows = lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))
    for row, one in zip(rows, series, strict=True):
        single = client.post("/anomalies", json={"series": [{"timestamps": one["timestamps"],
                                                               "values": one["values"]}], "data_frequency": "Hours"},
                             headers=bearer(key)).get_json()
        assert row["is_anomaly"] == single["is_anomaly"]
        assert row["expected"] == pytest.approx(single["expected"], rel=1e-12, abs=1e-12)
    assert rows[1]["is_anomaly"][40]
    text = client.get(f"/batches/{batch_id}/results", headers={**bearer(key), "Accept": "text/csv"})
    assert text.get_data(as_text=True).splitlines()[0] == (
        "unique_id,timestamp,expected,lower,upper,anomaly_score,is_anomaly,direction,error")


@pytest.mark.parametrize(
    ("change", "field", "issue"),
    [
        ({"forecast_horizon": 0}, "forecast_horizon", "Must be between 1 and 100"),
        ({"forecast_frequency": "Weekly"}, "forecast_frequency", "Must equal data_frequency"),
        ({"confidence": "high"}, "confidence", "Not a valid number."),
        ({"data_frequency": None}, "data_frequency", "Field may not be null."),
    ],
)
def test_request_fields_are_refused_as_post_forecast_refuses_them(client: FlaskClient, key: str,
                                                                 change: dict[str, Any], field: str,
                                                                 issue: str) -> None:
    answer = error_of(client.post("/batches", json=batch_body(2, **change), headers=bearer(key)), 400,
                      "INVALID_REQUEST")
    single = batch_body(1, **change)
    single["series"] = [{k: v for k, v in single["series"][0].items() if k != "id"}]
    expected = error_of(client.post("/forecast", json=single, headers=bearer(key)), 400, "INVALID_REQUEST")
    assert answer["details"]["field"] == expected["details"]["field"] == field
    assert answer["details"]["issue"] == expected["details"]["issue"] == issue
    assert answer["message"] == expected["message"]


def test_missing_fields_and_bad_series_shapes_are_400_listing_all(client: FlaskClient, key: str) -> None:
    body = {"series": [{"id": "a", "timestamps": "x", "values": []}, {"timestamps": [], "values": []},
                       {"id": "a", "timestamps": [], "values": []}]}
    error = error_of(client.post("/batches", json=body, headers=bearer(key)), 400, "INVALID_REQUEST")
    found = {(item["field"], item["issue"]) for item in error["details"]["errors"]}
    assert ("forecast_horizon", "Required field is missing") in found
    assert ("series[0].timestamps", "Must be an array.") in found
    assert ("series[1].id", "Required field is missing") in found
    duplicates = batch_body(2)
    duplicates["series"][1]["id"] = "s0"
    error = error_of(client.post("/batches", json=duplicates, headers=bearer(key)), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "series[1].id" and "unique" in error["details"]["issue"]
    assert error_of(client.post("/batches", json=batch_body(0), headers=bearer(key)), 400,
                    "INVALID_REQUEST")["details"]["field"] == "series"
    assert error_of(client.post("/batches", data=b"{nope", headers={**bearer(key), "Content-Type": "application/json"}),
                    400, "INVALID_REQUEST")["details"]["issue"].startswith("invalid JSON")
    assert error_of(client.post("/batches", json=batch_body(2, kind="both"), headers=bearer(key)), 400,
                    "INVALID_REQUEST")["details"]["field"] == "kind"
    model = client.post("/batches", json=batch_body(2), headers={**bearer(key), "X-Model-Id": "nope"})
    assert error_of(model, 400, "INVALID_REQUEST")["details"]["field"] == "X-Model-Id"


def test_nothing_is_stored_for_a_refused_request(app: Flask, client: FlaskClient) -> None:
    key = account_key(app, ("read", "write"))[0]
    client.post("/batches", json=batch_body(2, forecast_horizon=0), headers=bearer(key))
    client.post("/batches", data="id,ts\n", headers={**bearer(key), "Content-Type": "text/csv"},
                query_string=FIELDS)
    assert client.get("/batches", headers=bearer(key)).get_json() == {"batches": []}


def test_415_413_and_the_series_limit(client: FlaskClient, key: str) -> None:
    error = error_of(client.post("/batches", data="x", headers={**bearer(key), "Content-Type": "text/plain"}), 415,
                     "INVALID_REQUEST")
    assert error["details"]["field"] == "Content-Type"
    too_many = error_of(client.post("/batches", json=batch_body(21), headers=bearer(key)), 413, "INVALID_REQUEST")
    assert too_many["details"]["maximum"] == 20 and "at most 20" in too_many["message"]
    many_ids = "unique_id,timestamp,value\n" + "".join(f"id{i},2026-01-01T00:00:00,1\n" for i in range(21))
    over = client.post("/batches", data=many_ids, query_string=FIELDS,
                       headers={**bearer(key), "Content-Type": "text/csv"})
    assert error_of(over, 413, "INVALID_REQUEST")["details"]["maximum"] == 20
    big = "unique_id,timestamp,value\n" + "a,2026-01-01T00:00:00,1\n" * 4000  # past the 64 KiB of this app
    assert "64 KiB" in error_of(client.post("/batches", data=big, query_string=FIELDS,
                                            headers={**bearer(key), "Content-Type": "text/csv"}), 413,
                                "INVALID_REQUEST")["message"]


def test_csv_header_and_query_fields_are_checked_before_the_upload_is_kept(client: FlaskClient, key: str) -> None:
    headers = {**bearer(key), "Content-Type": "text/csv"}
    bad_header = client.post("/batches", data="id,time,y\na,2026-01-01T00:00:00,1\n", query_string=FIELDS,
                             headers=headers)
    assert error_of(bad_header, 400, "INVALID_REQUEST")["details"]["issue"] == (
        "Must be the header unique_id,timestamp,value (or unique_id,ds,y)")
    horizon = client.post("/batches", data="unique_id,timestamp,value\n", headers=headers,
                          query_string={**FIELDS, "forecast_horizon": "ten"})
    assert error_of(horizon, 400, "INVALID_REQUEST")["details"] == {
        "field": "forecast_horizon", "issue": "Not a valid integer.", "provided": "ten"}
    empty = client.post("/batches", data="unique_id,timestamp,value\n", headers=headers, query_string=FIELDS)
    assert error_of(empty, 400, "INVALID_REQUEST")["details"]["issue"] == "no rows"


def test_permissions_and_accounts(app: Flask, client: FlaskClient, key: str) -> None:
    reader = account_key(app, ("read",))[0]
    assert error_of(client.post("/batches", json=batch_body(1), headers=bearer(reader)), 403,
                    "UNAUTHORIZED")["details"]["required_permission"] == "write"
    batch_id = client.post("/batches", json=batch_body(1), headers=bearer(key)).get_json()["id"]
    stranger = account_key(app, ("read", "write", "delete"), account_id="someone-else")[0]
    for path in (f"/batches/{batch_id}", f"/batches/{batch_id}/results"):
        error_of(client.get(path, headers=bearer(stranger)), 404, "INVALID_REQUEST")
    error_of(client.delete(f"/batches/{batch_id}", headers=bearer(stranger)), 404, "INVALID_REQUEST")
    assert client.get("/batches", headers=bearer(stranger)).get_json() == {"batches": []}
    writer = account_key(app, ("read", "write"))[0]
    assert error_of(client.delete(f"/batches/{batch_id}", headers=bearer(writer)), 403,
                    "UNAUTHORIZED")["details"]["required_permission"] == "delete"
    assert client.get("/batches", headers=bearer(key)).get_json()["batches"][0]["id"] == batch_id
    assert client.delete(f"/batches/{batch_id}", headers=bearer(key)).status_code == 204
    error_of(client.get(f"/batches/{batch_id}", headers=bearer(key)), 404, "INVALID_REQUEST")


def test_a_batch_counts_one_request_per_series_and_is_refused_whole(app: Flask, client: FlaskClient) -> None:
    key, key_id = account_key(app, ("read", "write"), per_minute=100, per_hour=10, per_day=100)
    assert client.post("/batches", json=batch_body(4), headers=bearer(key)).status_code == 202
    refused = client.post("/batches", json=batch_body(7), headers=bearer(key))
    error = error_of(refused, 429, "RATE_LIMIT_EXCEEDED")
    assert error["details"]["window"] == "hour" and error["details"]["limit"] == 10
    assert "Retry-After" in refused.headers
    assert len(client.get("/batches", headers=bearer(key)).get_json()["batches"]) == 1
    # 4 series, the refused request itself and the GET: 6 spent, so 4 more fit and the next one does not.
    assert client.post("/batches", json=batch_body(4), headers=bearer(key)).status_code == 202
    assert client.post("/forecast", json={"series": [days(30)], **FIELDS},
                       headers=bearer(key)).status_code == 429
    services = services_of(app)
    services.usage.flush()
    with services.database.transaction() as connection:
        from app.keys import store as key_store

        assert key_store.get_key(connection, key_id=key_id).usage_count == 4 + 1 + 1 + 4 + 1


def test_cancel_deletes_the_data_and_a_worker_then_does_nothing(app: Flask, client: FlaskClient, key: str) -> None:
    services = services_of(app)
    services.jobs.immediate = False  # queued, not run: the worker below comes after the cancellation
    try:
        batch_id = client.post("/batches", json=batch_body(4), headers=bearer(key)).get_json()["id"]
    finally:
        services.jobs.immediate = True
    assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["status"] == "queued"
    assert client.delete(f"/batches/{batch_id}", headers=bearer(key)).status_code == 204
    cancelled = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert cancelled["status"] == "cancelled" and cancelled["expires_at"]
    error_of(client.get(f"/batches/{batch_id}/results", headers=bearer(key)), 404, "INVALID_REQUEST")
    from app.batches.tasks import process_chunk

    resources = WorkerResources(services.settings)
    tasks = batch_tasks(services.jobs)
    for seq in range(2):
        process_chunk(resources, tasks, batch_id, seq)
    assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["progress"]["done"] == 0
    assert list(stored_results.done_outputs(services.database, batch_id)) == []


def test_expired_batches_are_purged_by_the_sweep(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}", batch_result_ttl_hours=0.0))
    services = services_of(app)
    services.jobs.immediate = True
    try:
        key = account_key(app, ("read", "write"))[0]
        client = app.test_client()
        batch_id = client.post("/batches", json=batch_body(1), headers=bearer(key)).get_json()["id"]
        assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["status"] == "done"
        sweep_batches(WorkerResources(services.settings), batch_tasks(services.jobs))
        error_of(client.get(f"/batches/{batch_id}", headers=bearer(key)), 404, "INVALID_REQUEST")
    finally:
        services.close()


def test_the_openapi_document_describes_the_batch_endpoints(client: FlaskClient, key: str) -> None:
    from openapi_spec_validator import validate

    from app.batches.schemas import BatchListSchema, BatchSchema

    spec = client.get("/openapi.json", headers=bearer(key)).get_json()
    validate(spec)
    assert set(spec["paths"]["/batches"]) == {"post", "get"}
    assert set(spec["paths"]["/batches/{batch_id}"]) == {"get", "delete"}
    submit = spec["paths"]["/batches"]["post"]
    assert set(submit["requestBody"]["content"]) == {"application/json", "text/csv", "multipart/form-data"}
    assert set(submit["responses"]) == {"202", "400", "401", "403", "413", "415", "429", "500"}
    assert set(spec["paths"]["/batches/{batch_id}/results"]["get"]["responses"]["200"]["content"]) == {
        "application/x-ndjson", "text/csv"}
    request_schema = spec["components"]["schemas"]["ForecastBatchRequest"]["properties"]
    assert request_schema["forecast_horizon"] == {"type": "integer", "minimum": 1, "maximum": 100}
    answer = client.post("/batches", json=batch_body(1), headers=bearer(key)).get_json()
    assert BatchSchema().validate(answer) == {}
    assert BatchListSchema().validate(client.get("/batches", headers=bearer(key)).get_json()) == {}


def test_a_string_no_database_can_keep_is_refused_up_front(client: FlaskClient, key: str) -> None:
    body = batch_body(2)
    body["series"][1]["timestamps"][3] += "\x00"
    error = error_of(client.post("/batches", json=body, headers=bearer(key)), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "series[1].timestamps" and error["details"]["index"] == 3
    body = batch_body(2)
    body["series"][0]["values"][0] = "\ud800"
    error = error_of(client.post("/batches", data=json.dumps(body), headers={**bearer(key),
                                 "Content-Type": "application/json"}), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "series[0].values" and "surrogate" in error["details"]["issue"]
