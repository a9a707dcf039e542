"""POST /monitors/points, in-process on SQLite and PostgreSQL: points for many monitors in one JSON or NDJSON body,
each monitor answered as POST /monitors/{id}/points answers, bad rows refused on their own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import build_app, minute_series, new_key, services_of, settings_for

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}
MAX_POINTS = 500


@pytest.fixture(scope="module")
def bulk_app(module_database_url: str) -> Iterator[Flask]:
    app = build_app(settings_for(module_database_url, max_points=MAX_POINTS, allow_private_webhooks=True),
                    start_workers=True)
    yield app
    app.extensions["monitors"].sender.stop()
    services_of(app).close()


@pytest.fixture(scope="module")
def keys(bulk_app: Flask) -> dict[str, dict[str, str]]:
    def key(permissions: tuple[str, ...], account: str = "acct-bulk") -> dict[str, str]:
        plain, _ = new_key(bulk_app, permissions=permissions, account_id=account, **BIG_LIMITS)
        return {"Authorization": f"Bearer {plain}"}

    return {"writer": key(("read", "write")), "reader": key(("read",)),
            "other": key(("read", "write"), account="acct-bulk-other")}


@pytest.fixture
def client(bulk_app: Flask) -> FlaskClient:
    return bulk_app.test_client()


def create(client: FlaskClient, headers: dict[str, str], **fields: Any) -> str:
    response = client.post("/monitors", json={"name": "bulk", "data_frequency": "Minutes", **fields},
                           headers=headers)
    assert response.status_code == 201, response.json
    return response.json["id"]


def rows_for(monitor_id: str, stamps: list[str], values: list[float]) -> list[dict[str, Any]]:
    return [{"monitor_id": monitor_id, "timestamp": t, "value": v} for t, v in zip(stamps, values, strict=True)]


def interleave(*groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index in range(max(len(g) for g in groups)):
        out.extend(g[index] for g in groups if index < len(g))
    return out


def ndjson(rows: list[Any]) -> bytes:
    return b"\n".join(json.dumps(r).encode() if not isinstance(r, bytes) else r for r in rows) + b"\n"


@pytest.mark.parametrize("form", ["json", "ndjson"])
def test_each_monitor_is_answered_as_its_own_append(client: FlaskClient, keys: dict, form: str) -> None:
    writer = keys["writer"]
    a, b, twin_a, twin_b = (create(client, writer) for _ in range(4))
    stamps, values = minute_series(60)
    other_values = [v * 3 + 1 for v in values]
    rows = interleave(rows_for(a, stamps, values), rows_for(b, stamps[:30], other_values[:30]))
    if form == "json":
        answer = client.post("/monitors/points", json={"points": rows}, headers=writer)
    else:
        answer = client.post("/monitors/points", data=ndjson(rows),
                             headers={**writer, "Content-Type": "application/x-ndjson"})
    assert answer.status_code == 200, answer.json
    body = answer.json
    assert body["rows"] == 90 and body["stored_points"] == 90 and body["failed_rows"] == 0
    assert body["rejected_rows"] == []
    by_id = {entry["monitor_id"]: entry for entry in body["monitors"]}
    single_a = client.post(f"/monitors/{twin_a}/points", json={"timestamps": stamps, "values": values},
                           headers=writer).json
    single_b = client.post(f"/monitors/{twin_b}/points", json={"timestamps": stamps[:30],
                                                               "values": other_values[:30]}, headers=writer).json
    for entry, single in ((by_id[a], single_a), (by_id[b], single_b)):
        assert entry["status"] == 200
        assert {k: v for k, v in entry.items() if k not in ("monitor_id", "status", "rows")} == \
            {k: v for k, v in single.items() if k != "monitor_id"}
    assert by_id[a]["rows"] == [r for r in range(90) if rows[r]["monitor_id"] == a]

    # The same body again: every point a duplicate answered as stored, nothing stored twice.
    again = client.post("/monitors/points", json={"points": rows}, headers=writer).json
    assert again["stored_points"] == 0
    assert [e["duplicate_points"] for e in again["monitors"]] == [60, 30]
    assert [e["point_count"] for e in again["monitors"]] == [60, 30]


def test_a_body_is_stored_in_transactions_the_database_bounds(client: FlaskClient, keys: dict,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite has one writer, held by a transaction while it writes: a body goes in transactions of at most 250
    points there (5,000 on PostgreSQL), never splitting a series, and each monitor's answer is its own append's."""
    from app.monitors.intake import ingest

    transactions: list[list[int]] = []
    append_many = ingest.append_many

    def recorded(**kwargs: Any) -> Any:
        transactions.append([len(entry.points.epochs) for entry in kwargs["batch"]])
        return append_many(**kwargs)

    monkeypatch.setattr(ingest, "append_many", recorded)
    writer = keys["writer"]
    monitors = [create(client, writer) for _ in range(3)]
    stamps, values = minute_series(120)
    rows = interleave(*(rows_for(monitor, stamps, values) for monitor in monitors))
    answer = client.post("/monitors/points", json={"points": rows}, headers=writer)
    assert answer.status_code == 200, answer.json
    sqlite = services_of(client.application).database.settings.sqlite_path is not None
    assert transactions == ([[120, 120], [120]] if sqlite else [[120, 120, 120]])
    assert [entry["point_count"] for entry in answer.json["monitors"]] == [120, 120, 120]
    answers = [{k: v for k, v in entry.items() if k not in ("monitor_id", "status", "rows")}
               for entry in answer.json["monitors"]]
    assert answers[0] == answers[1] == answers[2]


def test_bad_rows_get_their_own_entries_and_change_nothing_else(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    good, conflicted = create(client, writer), create(client, writer)
    foreign = create(client, keys["other"])
    reader = create(client, writer, prometheus_url="http://127.0.0.1:9", prometheus_query="up")
    stamps, values = minute_series(10)
    assert client.post(f"/monitors/{conflicted}/points", json={"timestamps": stamps[:5], "values": values[:5]},
                       headers=writer).status_code == 200
    rows: list[Any] = [
        {"monitor_id": good, "timestamp": stamps[0], "value": values[0]},  # 0
        {"monitor_id": good, "timestamp": "yesterday", "value": 1.0},  # 1 bad timestamp
        {"monitor_id": good, "timestamp": stamps[1], "value": None},  # 2 null value
        b'{"monitor_id": "broken',  # 3 not JSON
        [1, 2, 3],  # 4 not an object
        {"timestamp": stamps[2], "value": 1.0},  # 5 no monitor_id
        {"monitor_id": good, "timestamp": stamps[0], "value": values[0]},  # 6 not after row 0
        {"monitor_id": good, "timestamp": stamps[3], "value": values[3]},  # 7
        {"monitor_id": conflicted, "timestamp": stamps[4], "value": values[4] + 1},  # 8 conflicts with the stored
        {"monitor_id": conflicted, "timestamp": stamps[5], "value": values[5]},  # 9 refused with its monitor's row 8
        {"monitor_id": "mon_" + "0" * 24, "timestamp": stamps[0], "value": 1.0},  # 10 no such monitor
        {"monitor_id": foreign, "timestamp": stamps[0], "value": 1.0},  # 11 another account's
        {"monitor_id": reader, "timestamp": stamps[0], "value": 1.0},  # 12 reads Prometheus, takes no points
        {"monitor_id": good, "timestamp": stamps[4], "value": 1e301},  # 13 out of range
        {"monitor_id": good, "timestamp": "2026-01-01T00:05:00+00:00", "value": 1.0},  # 14 another timestamp form
        {"monitor_id": "mon_\x00" + "0" * 23, "timestamp": stamps[0], "value": 1.0},  # 15 not a monitor id
    ]
    answer = client.post("/monitors/points", data=ndjson(rows),
                         headers={**writer, "Content-Type": "application/x-ndjson"})
    assert answer.status_code == 207, answer.json
    body = answer.json
    rejected = {r["row"]: r for r in body["rejected_rows"]}
    assert set(rejected) == {1, 2, 3, 4, 5, 6, 13, 14, 15}
    assert all(r["status"] == 422 and r["error"]["code"] for r in rejected.values())
    assert rejected[1]["error"]["details"]["field"] == "timestamp"
    assert rejected[2]["error"]["details"]["field"] == "value"
    assert rejected[5]["error"]["details"]["field"] == rejected[15]["error"]["details"]["field"] == "monitor_id"
    assert "not after the previous row" in rejected[6]["error"]["message"]
    by_id = {e["monitor_id"]: e for e in body["monitors"]}
    assert by_id[good]["status"] == 200 and by_id[good]["rows"] == [0, 7] and by_id[good]["new_points"] == 2
    assert by_id[conflicted]["status"] == 422 and by_id[conflicted]["error"]["details"]["row"] == 8
    missing = "mon_" + "0" * 24
    assert by_id[missing]["status"] == 404 and by_id[foreign]["status"] == 404
    assert by_id[foreign]["error"] == by_id[missing]["error"] | {
        "details": {**by_id[missing]["error"]["details"], "provided": foreign}}
    assert by_id[reader]["status"] == 400
    assert body["stored_points"] == 2 and body["failed_rows"] == 9 + 2 + 3
    stored = client.get(f"/monitors/{conflicted}?points=100", headers=writer).json
    assert stored["point_count"] == 5  # nothing of its refused rows
    assert client.get(f"/monitors/{foreign}", headers=keys["other"]).json["point_count"] == 0


def test_whole_body_problems(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    monitor = create(client, writer)
    stamps, values = minute_series(MAX_POINTS + 1)
    too_many = client.post("/monitors/points", json={"points": rows_for(monitor, stamps, values)}, headers=writer)
    assert too_many.status_code == 422 and too_many.json["error"]["details"]["maximum"] == MAX_POINTS
    lines = client.post("/monitors/points", data=ndjson(rows_for(monitor, stamps, values)),
                        headers={**writer, "Content-Type": "application/x-ndjson"})
    assert lines.status_code == 422
    assert client.get(f"/monitors/{monitor}", headers=writer).json["point_count"] == 0
    assert client.post("/monitors/points", data=b"{not json", headers={**writer, "Content-Type":
                                                                       "application/json"}).status_code == 400
    assert client.post("/monitors/points", json={"rows": []}, headers=writer).status_code == 400
    assert client.post("/monitors/points", json={"points": []}, headers=writer).status_code == 422
    assert client.post("/monitors/points", data=b"\n\n", headers={**writer, "Content-Type":
                                                                  "application/x-ndjson"}).status_code == 422
    nothing_usable = client.post("/monitors/points", json={"points": [
        {"monitor_id": monitor, "timestamp": "soon", "value": 1.0}, {"monitor_id": 7, "timestamp": stamps[0]}]},
        headers=writer)
    assert nothing_usable.status_code == 422, nothing_usable.json
    error = nothing_usable.json["error"]
    assert error["details"]["rejected_rows"] == 2 and [e["row"] for e in error["details"]["errors"]] == [0, 1]
    assert error["details"]["field"] == "timestamp"
    assert client.post("/monitors/points", data=b"x", headers={**writer, "Content-Type":
                                                               "text/csv"}).status_code == 415
    assert client.post("/monitors/points", json={"points": []}, headers=keys["reader"]).status_code == 403
