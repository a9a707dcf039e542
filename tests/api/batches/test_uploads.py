"""CSV uploads and results at their edges, in-process (Huey's immediate mode runs the real task code): one id
limit for both doors, one parser's idea of a row for the count and the computation, a field past the csv
module's limit, NUL, formula-shaped ids in CSV results, floats written exactly, date-only timestamps, a batch
whose every series failed, the per-account quota on stored batch data, and the scan's bounded memory.
tests/e2e/test_batch_uploads_served.py drives the same edges through gunicorn and real workers."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.batches.results import csv_rows
from app.batches.submit import UploadScan
from tests.api.batches.test_routes import FIELDS, days, error_of, lines
from tests.support import bearer, immediate_app, new_key, services_of

QUOTA = 64 * 1024


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with immediate_app(tmp_path_factory.mktemp("uploads"), batch_max_series=500, batch_max_upload_bytes=40 * 1024,
                       batch_chunk_series=50, batch_account_quota_bytes=QUOTA) as application:
        yield application
        application.extensions["monitors"].sender.stop()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def account_key(app: Flask, **kwargs: Any) -> str:
    return new_key(app, ("read", "write", "delete"), account_id="acct-" + uuid.uuid4().hex[:12], **kwargs)[0]


@pytest.fixture
def key(app: Flask) -> str:
    return account_key(app)


def rows_of(series: list[tuple[str, dict[str, list[Any]]]], end: str = "\n") -> str:
    rows = ["unique_id,timestamp,value"]
    for name, data in series:
        rows += [f"{name},{stamp},{value!r}" for stamp, value in zip(data["timestamps"], data["values"], strict=True)]
    return end.join(rows) + end


def upload(client: FlaskClient, key: str, text: str | bytes, **query: Any) -> Any:
    return client.post("/batches", data=text, query_string={**FIELDS, **query},
                       headers={**bearer(key), "Content-Type": "text/csv"})


def test_a_csv_id_is_held_to_the_json_id_limit(client: FlaskClient, key: str) -> None:
    at_limit = upload(client, key, rows_of([("i" * 200, days(30))]))
    assert at_limit.status_code == 202, at_limit.get_data(as_text=True)
    error = error_of(upload(client, key, rows_of([("i" * 201, days(30))])), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "unique_id" and error["details"]["maximum"] == 200
    assert "200 characters" in error["message"]
    json_error = error_of(client.post("/batches", headers=bearer(key), json={
        **FIELDS, "series": [{"id": "i" * 201, **days(30)}]}), 400, "INVALID_REQUEST")
    assert "200 characters" in json_error["details"]["issue"]
    quoted = upload(client, key, rows_of([('"' + "q" * 300 + '"', days(30))]))
    assert error_of(quoted, 400, "INVALID_REQUEST")["details"]["maximum"] == 200


def test_cr_only_line_endings_are_counted_as_the_rows_they_are(app: Flask, client: FlaskClient) -> None:
    key = account_key(app, per_minute=100, per_hour=5, per_day=100)
    series = [(f"s{i}", days(12)) for i in range(8)]
    refused = upload(client, key, rows_of(series, end="\r"))
    error = error_of(refused, 429, "RATE_LIMIT_EXCEEDED")
    assert "8 series" in error["message"]
    fits = upload(client, key, rows_of(series[:2], end="\r"))
    assert fits.status_code == 202 and fits.get_json()["progress"]["total"] == 2
    quoted = "unique_id,timestamp,value\r" + "\r".join(f'"q{i}",2026-01-01T00:00:00,1' for i in range(8)) + "\r"
    assert error_of(upload(client, key, quoted), 429, "RATE_LIMIT_EXCEEDED")


def test_the_worker_computes_no_more_series_than_were_counted(app: Flask, client: FlaskClient) -> None:
    """Whatever the scan counted is all a worker computes: an upload the parser finds more series in (here the
    stored count is lowered behind the scan's back) fails whole, with nothing computed past the count."""
    key = account_key(app)
    services = services_of(app)
    services.jobs.immediate = False
    try:
        submitted = upload(client, key, rows_of([(f"s{i}", days(12)) for i in range(4)]))
    finally:
        services.jobs.immediate = True
    batch_id = submitted.get_json()["id"]
    from sqlalchemy import update

    from app.batches.records import batches_table
    from app.batches.tasks import batch_tasks, prepare_upload
    from app.jobs.resources import WorkerResources

    with services.database.transaction() as connection:
        connection.execute(update(batches_table).where(batches_table.c.id == batch_id).values(series_total=2))
    prepare_upload(WorkerResources(services.settings), batch_tasks(services.jobs), batch_id)
    failed = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert failed["status"] == "failed" and failed["progress"]["done"] == 0
    assert "2 series" in failed["error"]["message"]


def test_a_field_over_128_kib_is_refused_by_a_large_upload_limit(tmp_path: Any) -> None:
    with immediate_app(tmp_path) as app:
        key = account_key(app)
        text = 'unique_id,timestamp,value\na,2026-01-01T00:00:00,"' + "9" * (130 * 1024) + '"\n'
        error = error_of(upload(app.test_client(), key, text), 400, "INVALID_REQUEST")
        assert "131,072" in error["message"] and error["details"]["maximum"] == 131072


def test_nul_in_a_csv_id_is_a_400(client: FlaskClient, key: str) -> None:
    text = rows_of([("a\x00b", days(12)), ("a", days(12))])
    error = error_of(upload(client, key, text), 400, "INVALID_REQUEST")
    assert "NUL" in error["message"] and error["details"]["field"] == "body"
    assert client.get("/batches", headers=bearer(key)).get_json() == {"batches": []}


def test_formula_shaped_ids_are_defused_in_csv_results(client: FlaskClient, key: str) -> None:
    names = ["=1+2", "+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain", "'quoted"]
    body = {**FIELDS, "series": [{"id": name, **days(30)} for name in names]}
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    text = client.get(f"/batches/{batch_id}/results?format=csv", headers=bearer(key)).get_data(as_text=True)
    ids = [row[0] for row in list(csv.reader(io.StringIO(text, newline="")))[1:]]
    assert sorted(set(ids)) == sorted(["'=1+2", "'+cmd", "'-2+3", "'@SUM(A1)", "'\tx", "'\rx", "plain", "''quoted"])
    # Reversible: one leading apostrophe removed gives every id back.
    assert sorted({i[1:] if i.startswith("'") else i for i in ids}) == sorted(names)
    # The JSON lines keep the ids as submitted.
    assert [row["id"] for row in lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))] == names


def test_csv_results_write_each_float_as_its_shortest_exact_form(client: FlaskClient, key: str) -> None:
    values = [32 - 1e-14 * (i % 3) + i / 10 for i in range(40)]
    body = {**FIELDS, "series": [{"id": "f", "timestamps": days(40)["timestamps"], "values": values}]}
    batch_id = client.post("/batches", json=body, headers=bearer(key)).get_json()["id"]
    result = lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))[0]
    rows = list(csv.reader(io.StringIO(client.get(f"/batches/{batch_id}/results?format=csv",
                                                  headers=bearer(key)).get_data(as_text=True))))[1:]
    for row, lower, median, upper in zip(rows, result["lower_bound"], result["median"], result["upper_bound"],
                                         strict=True):
        assert row[2:5] == [repr(lower), repr(median), repr(upper)]


def test_results_csv_is_streamed_a_few_rows_at_a_time() -> None:
    """Long ids and many rows: no piece of the answer holds a chunk's rows at once."""
    output = b"".join(json.dumps({
        "id": f"{i}" + "x" * 199, "forecast_timestamps": ["2026-01-01T00:00:00"] * 100, "lower_bound": [1.5] * 100,
        "median": [2.5] * 100, "upper_bound": [3.5] * 100}).encode() + b"\n" for i in range(7))
    pieces = list(csv_rows(iter([output]), "forecast"))
    assert sum(map(len, pieces)) > 7 * 100 * 200
    assert max(map(len, pieces)) <= 64 * 1024


def test_date_only_timestamps_are_midnight_everywhere(client: FlaskClient, key: str) -> None:
    data = days(30)
    dates = [stamp[:10] for stamp in data["timestamps"]]
    single = client.post("/forecast", headers=bearer(key),
                         json={**FIELDS, "series": [{"timestamps": dates, "values": data["values"]}]})
    assert single.status_code == 200, single.get_data(as_text=True)
    midnight = client.post("/forecast", headers=bearer(key), json={**FIELDS, "series": [data]}).get_json()
    assert single.get_json()["median"] == midnight["median"]
    assert single.get_json()["forecast_timestamps"] == midnight["forecast_timestamps"]
    anomalies = client.post("/anomalies", headers=bearer(key), json={
        "data_frequency": "Daily", "series": [{"timestamps": dates, "values": data["values"]}]})
    assert anomalies.status_code == 200, anomalies.get_data(as_text=True)
    monitor = client.post("/monitors", json={"name": "daily", "data_frequency": "Daily"}, headers=bearer(key))
    points = client.post(f"/monitors/{monitor.get_json()['id']}/points", headers=bearer(key),
                         json={"timestamps": dates[:3], "values": data["values"][:3]})
    assert points.status_code == 200, points.get_data(as_text=True)
    submitted = upload(client, key, rows_of([("d", {"timestamps": dates, "values": data["values"]})]))
    batch_id = submitted.get_json()["id"]
    assert client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()["progress"] == {
        "total": 1, "done": 1, "failed": 0}
    assert lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))[0]["median"] == midnight["median"]


def test_a_batch_whose_every_series_failed_is_failed(client: FlaskClient, key: str) -> None:
    short = {"timestamps": days(3)["timestamps"], "values": [1, 2, 3]}
    batch_id = client.post("/batches", headers=bearer(key), json={
        **FIELDS, "series": [{"id": "a", **short}, {"id": "b", **short}]}).get_json()["id"]
    failed = client.get(f"/batches/{batch_id}", headers=bearer(key)).get_json()
    assert failed["status"] == "failed" and failed["progress"] == {"total": 2, "done": 0, "failed": 2}
    assert failed["error"]["code"] == "DATA_VALIDATION_ERROR" and failed["error"]["details"]["failed"] == 2
    assert [row["id"] for row in lines(client.get(f"/batches/{batch_id}/results", headers=bearer(key)))] == ["a", "b"]
    csv_id = upload(client, key, rows_of([("a", short)])).get_json()["id"]
    assert client.get(f"/batches/{csv_id}", headers=bearer(key)).get_json()["status"] == "failed"
    mixed = client.post("/batches", headers=bearer(key), json={
        **FIELDS, "series": [{"id": "a", **short}, {"id": "b", **days(30)}]}).get_json()["id"]
    assert client.get(f"/batches/{mixed}", headers=bearer(key)).get_json()["status"] == "done"


def test_stored_batch_data_is_held_to_the_account_quota(app: Flask, client: FlaskClient) -> None:
    key = account_key(app)
    other = account_key(app)
    text = rows_of([(f"s{i}", days(12)) for i in range(40)])  # about 15 KiB
    assert len(text) < QUOTA // 3
    first, second, third = (upload(client, key, text) for _ in range(3))
    assert first.status_code == second.status_code == third.status_code == 202
    over = upload(client, key, text)
    error = error_of(over, 429, "RATE_LIMIT_EXCEEDED")
    assert error["details"]["limit"] == QUOTA and error["details"]["window"] == "stored batch data"
    assert "Retry-After" in over.headers
    assert len(client.get("/batches", headers=bearer(key)).get_json()["batches"]) == 3
    assert upload(client, other, text).status_code == 202  # another account is unaffected
    # Deleting a finished batch frees its share.
    assert client.delete(f"/batches/{first.get_json()['id']}", headers=bearer(key)).status_code == 204
    assert upload(client, key, text).status_code == 202
    body = {**FIELDS, "series": [{"id": f"j{i}", **days(40)} for i in range(30)]}  # a JSON batch counts too
    assert error_of(client.post("/batches", json=body, headers=bearer(key)), 429, "RATE_LIMIT_EXCEEDED")


def test_an_upload_larger_than_the_quota_itself_is_a_413(tmp_path: Any) -> None:
    with immediate_app(tmp_path, batch_account_quota_bytes=4096) as app:
        key = account_key(app)
        text = rows_of([(f"s{i}", days(12)) for i in range(20)])
        error = error_of(upload(app.test_client(), key, text), 413, "INVALID_REQUEST")
        assert error["details"]["maximum"] == 4096 and "quota" in error["message"]


def test_the_upload_scan_keeps_no_copy_of_the_ids() -> None:
    scan = UploadScan(max_series=100_000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, 20_000, 2_000):
            scan.feed("".join(f"{i:06d}{'x' * 194},2026-01-01T00:00:00,1\n"
                              for i in range(start, start + 2_000)).encode() if start else
                      ("unique_id,timestamp,value\n" + "".join(f"{i:06d}{'x' * 194},2026-01-01T00:00:00,1\n"
                                                               for i in range(2_000))).encode())
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert scan.finish() == 20_000
    # Each id kept as bytes costs its 200 bytes and 33 of header, over 4.6 MB for these; the scan keeps a
    # fixed-size hash of each (an int and its set slot), whatever the id's length.
    assert held < 20_000 * 160, held


def test_refused_uploads_store_nothing(app: Flask, client: FlaskClient) -> None:
    key = account_key(app)
    upload(client, key, rows_of([("a\x00", days(12))]))
    upload(client, key, rows_of([("i" * 201, days(12))]))
    assert client.get("/batches", headers=bearer(key)).get_json() == {"batches": []}
    with services_of(app).database.transaction() as connection:
        from sqlalchemy import func, select

        from app.batches.records import batches_table

        assert connection.scalar(select(func.count()).select_from(batches_table)
                                 .where(batches_table.c.status == "uploading")) == 0
