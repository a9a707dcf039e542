"""Monitors (issue 12) in-process, on the real worker pool: CRUD, permissions and accounts, judging equal to
POST /anomalies, idempotent retries, conflicts, retention, concurrent writers, forecasts and alerts."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select

from app.monitors.records import monitor_events_table, monitor_points_table
from tests.support import (
    Receiver,
    build_app,
    drop_all_tables,
    free_port,
    minute_series,
    new_key,
    services_of,
    settings_for,
    settled_deliveries,
)

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}


@pytest.fixture(scope="module")
def monitor_app(module_database_url: str) -> Iterator[Flask]:
    # Every test here on SQLite and on PostgreSQL: the append path runs its own compiled SQL on each.
    app = build_app(settings_for(module_database_url, allow_private_webhooks=True, max_points=5000),
                    start_workers=True)
    yield app
    app.extensions["monitors"].sender.stop()
    services_of(app).close()


@pytest.fixture(scope="module")
def keys(monitor_app: Flask) -> dict[str, dict[str, str]]:
    def key(permissions: tuple[str, ...], account: str = "acct-a") -> dict[str, str]:
        plain, _ = new_key(monitor_app, permissions=permissions, account_id=account, **BIG_LIMITS)
        return {"Authorization": f"Bearer {plain}"}

    return {
        "owner": key(("read", "write", "delete")),
        "reader": key(("read",)),
        "writer": key(("read", "write")),
        "other": key(("read", "write", "delete"), account="acct-b"),
    }


@pytest.fixture
def client(monitor_app: Flask) -> FlaskClient:
    return monitor_app.test_client()


def create(client: FlaskClient, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    body = {"name": "cpu", "data_frequency": "Minutes", **fields}
    response = client.post("/monitors", json=body, headers=headers)
    assert response.status_code == 201, response.json
    return response.json


def post_points(client: FlaskClient, headers: dict[str, str], monitor_id: str, stamps: list[str],
                values: list[float]) -> Any:
    return client.post(f"/monitors/{monitor_id}/points", json={"timestamps": stamps, "values": values},
                       headers=headers)


def only_series(client: FlaskClient, headers: dict[str, str], monitor_id: str) -> int:
    """The id of the monitor's one series: the key of its state in a process's cache."""
    listed = client.get(f"/monitors/{monitor_id}", headers=headers).get_json()["series"]
    assert len(listed) == 1 and listed[0]["labels"] == {}
    return int(listed[0]["id"])


def test_crud_round_trip_and_delete_removes_every_point(client: FlaskClient, keys: dict, monitor_app: Flask) -> None:
    owner = keys["owner"]
    created = create(client, owner, confidence=0.95, retention_points=500, unknown_field="ignored")
    assert created["webhook_secret"].startswith("whsec_")
    assert created["confidence"] == 0.95 and created["retention_points"] == 500
    assert created["model"] == "anomaly-model-1" and created["point_count"] == 0
    monitor_id = created["id"]

    got = client.get(f"/monitors/{monitor_id}", headers=keys["reader"])
    assert got.status_code == 200 and "webhook_secret" not in got.json
    assert got.json["forecast"] is None and got.json["points"] == []
    listed = client.get("/monitors", headers=keys["reader"]).json["monitors"]
    assert monitor_id in [m["id"] for m in listed]

    patched = client.patch(f"/monitors/{monitor_id}", json={"name": "cpu-2", "confidence": 0.999}, headers=owner)
    assert patched.status_code == 200
    assert patched.json["name"] == "cpu-2" and patched.json["confidence"] == 0.999

    stamps, values = minute_series(40)
    assert post_points(client, owner, monitor_id, stamps, values).status_code == 200
    with services_of(monitor_app).database.transaction() as connection:
        count = connection.execute(select(func.count()).select_from(monitor_points_table).where(
            monitor_points_table.c.monitor_id == monitor_id)).scalar_one()
    assert count == 40

    assert client.delete(f"/monitors/{monitor_id}", headers=owner).status_code == 204
    assert client.get(f"/monitors/{monitor_id}", headers=owner).status_code == 404
    with services_of(monitor_app).database.transaction() as connection:
        count = connection.execute(select(func.count()).select_from(monitor_points_table).where(
            monitor_points_table.c.monitor_id == monitor_id)).scalar_one()
    assert count == 0


def test_permissions_and_accounts(client: FlaskClient, keys: dict) -> None:
    monitor_id = create(client, keys["owner"])["id"]
    stamps, values = minute_series(3)
    assert client.post("/monitors", json={"name": "x", "data_frequency": "Hours"},
                       headers=keys["reader"]).status_code == 403
    assert post_points(client, keys["reader"], monitor_id, stamps, values).status_code == 403
    assert client.delete(f"/monitors/{monitor_id}", headers=keys["writer"]).status_code == 403
    assert post_points(client, keys["writer"], monitor_id, stamps, values).status_code == 200

    # Another account's monitor is a 404 on every route, exactly like a missing one.
    other = keys["other"]
    for method, path, body in [
        ("get", f"/monitors/{monitor_id}", None),
        ("patch", f"/monitors/{monitor_id}", {"name": "stolen"}),
        ("delete", f"/monitors/{monitor_id}", None),
        ("post", f"/monitors/{monitor_id}/points", {"timestamps": stamps, "values": values}),
        ("get", f"/monitors/{monitor_id}/deliveries", None),
        ("post", f"/monitors/{monitor_id}/webhook-secret", None),
    ]:
        answer = getattr(client, method)(path, json=body, headers=other)
        missing = getattr(client, method)(path.replace(monitor_id, "mon_doesnotexist"), json=body, headers=other)
        assert answer.status_code == 404 and missing.status_code == 404, (method, path)
        assert answer.json["error"]["message"] == missing.json["error"]["message"]
    assert monitor_id not in [m["id"] for m in client.get("/monitors", headers=other).json["monitors"]]
    assert client.get(f"/monitors/{monitor_id}", headers=keys["owner"]).json["name"] == "cpu"


def test_points_are_judged_exactly_as_post_anomalies(client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    monitor_id = create(client, owner, confidence=0.99)["id"]
    stamps, values = minute_series(400)
    values[300] += 25  # a spike the judge must flag
    values[350] -= 25
    answers = [post_points(client, owner, monitor_id, stamps[:150], values[:150]).json]
    for i in range(150, 400, 37):  # uneven batches, so batch edges land everywhere
        answers.append(post_points(client, owner, monitor_id, stamps[i:i + 37], values[i:i + 37]).json)
    streamed = {name: [x for a in answers for x in a[name]] for name in
                ("anomaly_score", "expected", "lower_bound", "upper_bound", "is_anomaly", "direction")}
    whole = client.post("/anomalies", json={"series": [{"timestamps": stamps, "values": values}],
                                            "data_frequency": "Minutes", "confidence": 0.99}, headers=owner)
    assert whole.status_code == 200, whole.json
    for name, column in streamed.items():
        assert column == whole.json[name], name
    assert answers[0]["warmup_points"] == whole.json["warmup_points"]
    assert answers[-1]["period"] == whole.json["period"]
    assert streamed["is_anomaly"][300] and streamed["direction"][300] == "up"
    assert streamed["is_anomaly"][350] and streamed["direction"][350] == "down"

    view = client.get(f"/monitors/{monitor_id}?points=5", headers=owner).json
    assert [p["timestamp"] for p in view["points"]] == stamps[-5:]
    assert [p["anomaly_score"] for p in view["points"]] == whole.json["anomaly_score"][-5:]
    assert view["point_count"] == 400 and view["last_timestamp"] == stamps[-1]


def test_a_monitor_on_the_pool_detector_judges_as_post_anomalies_with_it(client: FlaskClient, keys: dict) -> None:
    # anomaly-model-2 has no streaming state: each append is judged on the worker pool, through the same front
    # door as POST /anomalies, from the history the monitor keeps.
    owner = keys["owner"]
    monitor_id = create(client, owner, model="anomaly-model-2", confidence=0.99)["id"]
    stamps, values = minute_series(200)
    values[150] += 25
    answers = [post_points(client, owner, monitor_id, stamps[:90], values[:90]).json]
    for i in range(90, 200, 41):
        answers.append(post_points(client, owner, monitor_id, stamps[i:i + 41], values[i:i + 41]).json)
    streamed = {name: [x for a in answers for x in a[name]] for name in
                ("anomaly_score", "expected", "lower_bound", "upper_bound", "is_anomaly", "direction")}
    whole = client.post("/anomalies", json={"series": [{"timestamps": stamps, "values": values}],
                                            "data_frequency": "Minutes", "confidence": 0.99},
                        headers={**owner, "X-Model-Id": "anomaly-model-2"})
    assert whole.status_code == 200, whole.json
    for name, column in streamed.items():
        assert column == whole.json[name], name
    assert streamed["is_anomaly"][150] and streamed["direction"][150] == "up"


def test_retries_are_idempotent_and_conflicts_name_the_index(client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    monitor_id = create(client, owner)["id"]
    stamps, values = minute_series(60)
    first = post_points(client, owner, monitor_id, stamps[:50], values[:50]).json
    again = post_points(client, owner, monitor_id, stamps[40:50], values[40:50])
    assert again.status_code == 200
    assert again.json["new_points"] == 0 and again.json["duplicate_points"] == 10
    assert again.json["anomaly_score"] == first["anomaly_score"][40:50]
    assert again.json["expected"] == first["expected"][40:50]

    # A retry that overlaps the stored end and carries new points stores only the new ones.
    overlap = post_points(client, owner, monitor_id, stamps[45:60], values[45:60]).json
    assert overlap["new_points"] == 10 and overlap["duplicate_points"] == 5 and overlap["point_count"] == 60

    changed = values[45:48].copy()
    changed[2] += 1.0
    conflict = post_points(client, owner, monitor_id, stamps[45:48], changed)
    assert conflict.status_code == 422
    assert conflict.json["error"]["details"]["index"] == 2
    assert conflict.json["error"]["details"]["field"] == "values"

    # Older than the newest stored point and never stored: a hole cannot be back-filled.
    older = post_points(client, owner, monitor_id, ["2026-01-01T00:30:30Z", stamps[59]], [1.0, values[59]])
    assert older.status_code == 422 and older.json["error"]["details"]["index"] == 0

    unordered = post_points(client, owner, monitor_id, ["2026-01-02T00:00:00Z", "2026-01-01T23:00:00Z"], [1, 2])
    assert unordered.status_code == 422 and unordered.json["error"]["details"]["index"] == 1
    assert client.get(f"/monitors/{monitor_id}", headers=owner).json["point_count"] == 60


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"timestamps": "x", "values": [1]}, 400, "timestamps"),
        ({"values": [1]}, 400, "timestamps"),
        ({"timestamps": ["2026-02-01T00:00:00Z"], "values": ["1"]}, 422, "values"),
        ({"timestamps": ["2026-02-01T00:00:00Z", "2026-02-01T00:01:00"], "values": [1, 2]}, 422, "timestamps"),
        ({"timestamps": ["2026-02-01 00:00"], "values": [1]}, 422, "timestamps"),
        ({"timestamps": ["2026-02-01T00:00:00Z"], "values": [1, 2]}, 422, "points"),
        ({"timestamps": [], "values": []}, 422, "points"),
        ({"timestamps": [f"2026-02-01T00:00:{i % 60:02d}Z" for i in range(5001)], "values": [1] * 5001}, 422,
         "points"),
    ],
)
def test_bad_points(client: FlaskClient, keys: dict, body: dict, status: int, field: str) -> None:
    monitor_id = create(client, keys["owner"])["id"]
    answer = client.post(f"/monitors/{monitor_id}/points", json=body, headers=keys["owner"])
    assert answer.status_code == status, answer.json
    assert answer.json["error"]["details"]["field"] == field


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": 5}, "name"),
        ({"data_frequency": "Hourly"}, "data_frequency"),
        ({"confidence": 0.3}, "confidence"),
        ({"confidence": "0.9"}, "confidence"),
        ({"retention_points": 0}, "retention_points"),
        ({"model": "forecast-model-1"}, "model"),
        ({"webhook_url": "ftp://example.com/x"}, "webhook_url"),
        ({"webhook_url": "not a url"}, "webhook_url"),
    ],
)
def test_bad_monitor_fields(client: FlaskClient, keys: dict, fields: dict, field: str) -> None:
    body = {"name": "cpu", "data_frequency": "Minutes", **fields}
    answer = client.post("/monitors", json=body, headers=keys["owner"])
    assert answer.status_code == 400, answer.json
    assert answer.json["error"]["details"]["field"] == field


@pytest.mark.parametrize(
    "url",
    ["https://127.0.0.1/hook", "https://localhost/hook", "https://10.1.2.3/hook", "https://192.168.1.1/x",
     "https://169.254.169.254/latest/meta-data", "https://[::1]/hook", "https://[fe80::1]/hook",
     "http://127.0.0.1:9/hook", "https://0.0.0.0/hook"],
)
def test_private_webhooks_refused_unless_allowed(tmp_path: Path, url: str) -> None:
    from app.monitors.alerts.webhooks import WebhookAddressError, check_url

    with pytest.raises(WebhookAddressError):
        check_url(url, allow_private=False)
    check_url(url.replace("https://", "http://"), allow_private=True)  # the tests' own receivers use this


def test_private_webhook_refused_by_a_server_without_the_setting(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'strict.sqlite3'}"))
    try:
        plain, _ = new_key(app, permissions=("read", "write"))
        answer = app.test_client().post(
            "/monitors", json={"name": "x", "data_frequency": "Minutes", "webhook_url": "http://127.0.0.1:9/h"},
            headers={"Authorization": f"Bearer {plain}"},
        )
        assert answer.status_code == 400
        assert answer.json["error"]["details"]["field"] == "webhook_url"
        assert "ALLOW_PRIVATE_WEBHOOKS" in answer.json["error"]["details"]["issue"]
    finally:
        services_of(app).close()


def test_retention_drops_the_oldest_points(client: FlaskClient, keys: dict, monitor_app: Flask) -> None:
    owner = keys["owner"]
    monitor_id = create(client, owner, retention_points=50)["id"]
    stamps, values = minute_series(130)
    post_points(client, owner, monitor_id, stamps[:45], values[:45])
    for i in range(45, 130, 10):
        assert post_points(client, owner, monitor_id, stamps[i:i + 10], values[i:i + 10]).status_code == 200
    view = client.get(f"/monitors/{monitor_id}?points=200", headers=owner).json
    assert view["point_count"] == 50
    assert [p["timestamp"] for p in view["points"]] == stamps[-50:]
    with services_of(monitor_app).database.transaction() as connection:
        stored = connection.execute(select(func.count()).select_from(monitor_points_table).where(
            monitor_points_table.c.monitor_id == monitor_id)).scalar_one()
    assert stored == 50


def test_forecast_continues_the_stored_series(client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    monitor_id = create(client, owner)["id"]
    stamps, values = minute_series(120)
    post_points(client, owner, monitor_id, stamps, values)
    view = client.get(f"/monitors/{monitor_id}?horizon=5&model=forecast-model-2&points=0", headers=owner).json
    forecast = view["forecast"]
    assert forecast["model"] == "forecast-model-2"
    assert forecast["forecast_timestamps"] == minute_series(5, start=120)[0]
    assert len(forecast["median"]) == 5
    assert all(lo <= mid <= hi for lo, mid, hi in zip(forecast["lower_bound"], forecast["median"],
                                                      forecast["upper_bound"], strict=True))
    assert "points" not in view
    bad = client.get(f"/monitors/{monitor_id}?horizon=500", headers=owner)
    assert bad.status_code == 400 and bad.json["error"]["details"]["field"] == "horizon"


def test_many_writers_lose_no_point_and_judge_none_twice(client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    monitor_id = create(client, owner)["id"]
    stamps, values = minute_series(120)

    def writer(_: int) -> list[Any]:
        # Every writer feeds the same stream (as retrying collectors do), one point at a time.
        return [post_points(client, owner, monitor_id, [s], [v]) for s, v in zip(stamps, values, strict=True)]

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = [r for batch in pool.map(writer, range(6)) for r in batch]
    assert all(r.status_code == 200 for r in results), [r.json for r in results if r.status_code != 200][:3]
    assert sum(r.json["new_points"] for r in results) == 120  # each point judged exactly once
    by_stamp: dict[str, set[float]] = {}
    for r in results:
        by_stamp.setdefault(r.json["timestamps"][0], set()).add(r.json["anomaly_score"][0])
    assert all(len(scores) == 1 for scores in by_stamp.values())  # every writer got the one stored verdict
    view = client.get(f"/monitors/{monitor_id}?points=200", headers=owner).json
    assert view["point_count"] == 120 and [p["timestamp"] for p in view["points"]] == stamps


def test_alerts_are_signed_ordered_and_logged(client: FlaskClient, keys: dict, monitor_app: Flask) -> None:
    receiver = Receiver().start()
    try:
        monitor_app.extensions["monitors"].sender.start()
        owner = keys["owner"]
        created = create(client, owner, webhook_url=receiver.url)
        monitor_id = created["id"]
        receiver.secrets[monitor_id] = created["webhook_secret"]
        stamps, values = minute_series(260)
        values[150] += 30
        values[151] += 30
        values[180] -= 30
        answer = post_points(client, owner, monitor_id, stamps, values).json
        flagged = [i for i, a in enumerate(answer["is_anomaly"]) if a]
        assert 150 in flagged and len(flagged) >= 2
        # One incident: it stays open until 48 points in a row have nothing beyond their range, so the spike and
        # the dip 30 points later are one incident, ended by a single event after the last of them.
        expected_events = len(flagged) + 1
        events = receiver.wait_for(expected_events)
        assert len(events) == expected_events
        assert [e["sequence"] for e in events] == list(range(1, expected_events + 1))
        assert all(d["signature_ok"] and d["event_id_header"] == d["event"]["id"] for d in receiver.deliveries)
        first = events[0]
        assert first["type"] == "anomaly" and first["point"]["timestamp"] == stamps[flagged[0]]
        assert first["point"]["reason"].startswith("The value")  # why it was flagged, as POST /anomalies says
        ended = [e for e in events if e["type"] == "anomaly_ended"]
        assert len(ended) == 1 and ended[0]["run"]["started_at"] == stamps[flagged[0]]
        assert stamps.index(ended[0]["run"]["ended_at"]) >= flagged[-1] + 48
        anomalies = [e["point"] for e in events if e["type"] == "anomaly"]
        assert ended[0]["run"]["peak"] == max(anomalies, key=lambda p: abs(p["value"] - p["expected"]))

        view = client.get(f"/monitors/{monitor_id}", headers=owner).json
        assert view["open_anomalies"] == []

        log = settled_deliveries(client, keys["reader"], monitor_id)
        assert len(log) == expected_events
        assert all(d["status"] == "delivered" and len(d["attempts"]) == 1 for d in log)
        assert log[0]["attempts"][0]["status_code"] == 200

        # Rotation: the new secret signs what follows; the old one no longer verifies.
        rotated = client.post(f"/monitors/{monitor_id}/webhook-secret", headers=owner).json["webhook_secret"]
        assert rotated != created["webhook_secret"]
        receiver.secrets[monitor_id] = rotated
        more_stamps, more_values = minute_series(2, start=260)
        more_values[1] += 60
        post_points(client, owner, monitor_id, more_stamps, more_values)
        receiver.wait_for(expected_events + 1)
        assert receiver.deliveries[-1]["signature_ok"]
        assert client.get(f"/monitors/{monitor_id}", headers=owner).json["open_anomalies"][0]["timestamp"] == \
            more_stamps[1]
    finally:
        receiver.stop()


def test_failed_deliveries_are_retried_in_order(client: FlaskClient, keys: dict, monitor_app: Flask,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    sender = monitor_app.extensions["monitors"].sender
    monkeypatch.setattr(sender, "policy", type(sender.policy)(base_seconds=0.1, max_delay_seconds=0.4))
    sender.start()
    receiver = Receiver()
    receiver.status = 503
    receiver.start()
    try:
        owner = keys["owner"]
        created = create(client, owner, webhook_url=receiver.url)
        monitor_id = created["id"]
        receiver.secrets[monitor_id] = created["webhook_secret"]
        stamps, values = minute_series(100)
        for i in (60, 70, 80):
            values[i] += 40
        post_points(client, owner, monitor_id, stamps, values)
        deadline = time.monotonic() + 20
        while len(receiver.deliveries) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {d["event"]["sequence"] for d in receiver.deliveries} == {1}  # the head blocks its successors
        receiver.status = 200
        with services_of(monitor_app).database.transaction() as connection:
            total = connection.execute(select(func.count()).select_from(monitor_events_table).where(
                monitor_events_table.c.monitor_id == monitor_id)).scalar_one()
        events = receiver.wait_for(total)
        assert [e["sequence"] for e in events] == list(range(1, total + 1))
        log = settled_deliveries(client, owner, monitor_id)
        head = next(d for d in log if d["sequence"] == 1)
        assert head["status"] == "delivered" and len(head["attempts"]) >= 3
        assert [a["status_code"] for a in head["attempts"]][:2] == [503, 503]
    finally:
        receiver.stop()


def test_history_cache_is_bounded_by_points_and_tracks_growth() -> None:
    from app.monitors.state.cache import History, HistoryCache

    cache = HistoryCache(max_points=100)
    for i in range(10):
        entry = History(revision=0)
        entry.append(list(range(30)), [0.0] * 30, head_rows=16, tail_rows=1000)
        cache.put(str(i), entry)
    assert cache.get("0", 0) is None and cache.get("9", 0) is not None  # least recently used went first
    grown = cache.get("9", 0)
    assert grown is not None
    grown.append([100, 101], [1.0, 1.0], head_rows=16, tail_rows=1000)
    cache.put("9", grown)
    assert cache.get("9", 1) is None  # another revision is never served
    epochs, values = grown.series(1000)
    assert epochs.tolist() == list(range(30)) + [100, 101] and values.tolist()[-1] == 1.0


def test_the_default_state_cache_holds_a_thousand_one_second_monitors_with_full_windows() -> None:
    from app.compute.detect.streaming import WINDOW_ROWS, StreamingDetector
    from app.monitors.state.cache import HistoryCache, JudgeState

    detector = StreamingDetector(data_frequency="Seconds")
    state = detector.initial_state()
    rows = WINDOW_ROWS + 600  # past the warm-up, the error window full
    rng = random.Random(3)
    detector.update(state, [float(k) for k in range(rows)],
                    [50 + 10 * math.sin(2 * math.pi * k / 60) + rng.gauss(0, 1) for k in range(rows)])
    cache = HistoryCache()
    for i in range(1000):
        cache.put(str(i), JudgeState(revision=0, detector=state, size=StreamingDetector.size(state)))
    assert all(cache.get(str(i), 0) is not None for i in range(1000))


def test_many_writers_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    """The row lock path: concurrent appends to one monitor on PostgreSQL store and judge each point once."""
    app = build_app(settings_for(postgres_url), start_workers=True)
    try:
        plain, _ = new_key(app, permissions=("read", "write"), **BIG_LIMITS)
        headers = {"Authorization": f"Bearer {plain}"}
        client = app.test_client()
        monitor_id = create(client, headers)["id"]
        stamps, values = minute_series(60)

        def writer(_: int) -> list[Any]:
            return [post_points(client, headers, monitor_id, stamps[i:i + 3], values[i:i + 3])
                    for i in range(0, 60, 3)]

        with ThreadPoolExecutor(max_workers=6) as pool:
            results = [r for batch in pool.map(writer, range(6)) for r in batch]
        assert all(r.status_code == 200 for r in results)
        assert sum(r.json["new_points"] for r in results) == 60
        assert client.get(f"/monitors/{monitor_id}?points=100", headers=headers).json["point_count"] == 60
    finally:
        services_of(app).close()
        drop_all_tables(postgres_url)  # the session's database is shared with other modules' tests


def hourly_points(values: list[float]) -> tuple[list[str], list[float]]:
    stamps = [f"2026-02-{1 + i // 24:02d}T{i % 24:02d}:00:00Z" for i in range(len(values))]
    return stamps, values


def daily_wave(count: int) -> list[float]:
    return [120 + 60 * math.sin(2 * math.pi * (i + 16) / 24) + 3 * math.sin(i * 1.7) for i in range(count)]


def test_spikes_then_a_drop_one_point_at_a_time(client: FlaskClient, keys: dict, monitor_app: Flask) -> None:
    monitor = create(client, keys["owner"], data_frequency="Hours")
    values = daily_wave(400)
    for row in (150, 151, 300):
        values[row] += 600
    values[350] = 53.0
    stamps, values = hourly_points(values)
    answers = [post_points(client, keys["owner"], monitor["id"], stamps[i : i + 1], values[i : i + 1]).get_json()
               for i in range(400)]
    flagged = [i for i, answer in enumerate(answers) if answer["is_anomaly"][0]]
    assert flagged == [150, 300, 350]  # 151 repeats 150: one incident, one anomaly
    width = [answer["upper_bound"][0] - answer["expected"][0] for answer in answers]
    assert width[154] <= 1.5 * width[149] and width[303] <= 1.5 * width[299]
    # One point at a time gives what the whole series gives at once.
    whole = client.post("/anomalies", headers=keys["owner"],
                        json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
    assert [answer["anomaly_score"][0] for answer in answers] == whole.get_json()["anomaly_score"]
    # The forecast ahead starts from what was judged normal: the flagged points count as their expected values.
    view = client.get(f"/monitors/{monitor['id']}?points=0&horizon=3&model=forecast-model-2",
                      headers=keys["owner"]).get_json()
    assert view["forecast"]["median"][0] > 100


def test_a_restarted_process_rebuilds_the_state_from_the_stored_points(
    client: FlaskClient, keys: dict, monitor_app: Flask
) -> None:
    monitor = create(client, keys["owner"], data_frequency="Hours")
    stamps, values = hourly_points(daily_wave(300))
    post_points(client, keys["owner"], monitor["id"], stamps[:250], values[:250])
    cache = monitor_app.extensions["monitors"].cache
    series_id = only_series(client, keys["owner"], monitor["id"])
    assert cache.peek(series_id) is not None
    cache.drop(series_id)  # what a restart or another process sees
    after = post_points(client, keys["owner"], monitor["id"], stamps[250:], values[250:]).get_json()
    whole = client.post("/anomalies", headers=keys["owner"],
                        json={"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Hours"})
    assert after["anomaly_score"] == whole.get_json()["anomaly_score"][250:]


def rejudged(reason: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("forecast_monitor_points_rejudged_total", {"reason": reason}) or 0.0


def test_processes_taking_turns_catch_up_from_the_new_points_instead_of_replaying(
    client: FlaskClient, keys: dict, monitor_app: Flask, module_database_url: str
) -> None:
    from app.compute.detect.streaming import StreamingDetector

    # Another gunicorn process or host: the same database, a state cache of its own.
    other_app = build_app(settings_for(module_database_url, allow_private_webhooks=True, max_points=5000))
    try:
        other = other_app.test_client()
        owner = keys["owner"]
        noise = random.Random(11)
        count = StreamingDetector(data_frequency="Hours").rebuild_rows([3600.0 * i for i in range(11)]) + 600
        values = [120 + 60 * math.sin(2 * math.pi * i / 24) + noise.gauss(0, 3) + (400 if i % 997 == 0 else 0)
                  for i in range(count)]
        stamps = [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1.6e9 + 3600 * i)) for i in range(count)]
        shared = create(client, owner, data_frequency="Hours", retention_points=count)["id"]
        alone = create(client, owner, data_frequency="Hours", retention_points=count, name="alone")["id"]
        seeded = count - 40
        for start in range(0, seeded, 5000):
            for monitor_id in (shared, alone):
                end = min(seeded, start + 5000)
                assert post_points(client, owner, monitor_id, stamps[start:end], values[start:end]).status_code == 200
        mine = monitor_app.extensions["monitors"].cache
        shared_series = only_series(client, owner, shared)
        state = mine.peek(shared_series)
        assert state is not None
        turns, answers = [client, other], {shared: [], alone: []}
        caught_up, rebuilt = rejudged("catch_up"), rejudged("rebuild")
        for row in range(seeded, count):
            for monitor_id, sender in ((shared, turns[row % 2]), (alone, client)):
                answer = post_points(sender, owner, monitor_id, stamps[row : row + 1], values[row : row + 1])
                answers[monitor_id].append(answer.get_json()["anomaly_score"][0])
        # Each process advanced its own state over the points the other stored: the same verdicts as one process.
        assert answers[shared] == answers[alone]
        assert mine.peek(shared_series) is state
        # The other process took up the state this one saved with its last append (app.monitors.state.snapshots)
        # instead of rebuilding it from the stored points (more than a rebuild replays); after that each turn judged
        # again only the one point the other process had stored (none on the first turn).
        assert rejudged("rebuild") - rebuilt == 0
        assert rejudged("catch_up") - caught_up == (count - seeded) - 1
        # A point marked normal changes what the detector learns from the stored points: that is replayed.
        for monitor_id in (shared, alone):
            assert client.post(f"/monitors/{monitor_id}/feedback", headers=owner,
                               json={"timestamp": stamps[count - 20], "is_anomaly": False}).status_code == 200
        more = [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1.6e9 + 3600 * (count + i))) for i in range(2)]
        theirs = other_app.extensions["monitors"].cache.peek(shared_series)
        assert theirs is not None
        after_shared = post_points(other, owner, shared, more, [120.0, 125.0]).get_json()["anomaly_score"]
        after_alone = post_points(client, owner, alone, more, [120.0, 125.0]).get_json()["anomaly_score"]
        assert after_shared == after_alone
        assert other_app.extensions["monitors"].cache.peek(shared_series) is not theirs
    finally:
        other_app.extensions["monitors"].sender.stop()
        services_of(other_app).close()


def test_sensitivity_and_minimum_deviation(client: FlaskClient, keys: dict) -> None:
    noise = random.Random(1)
    values = [100.0 + noise.gauss(0, 0.5) for _ in range(200)]
    values[150] = 103.0  # outside the default range, inside the widest (sensitivity 0)
    stamps, values = hourly_points(values)
    plain = create(client, keys["owner"], data_frequency="Hours")
    quiet = create(client, keys["owner"], data_frequency="Hours", min_deviation=10)
    relative = create(client, keys["owner"], data_frequency="Hours", min_relative_deviation=0.1)
    dull = create(client, keys["owner"], data_frequency="Hours", sensitivity=0)
    assert quiet["min_deviation"] == 10 and dull["sensitivity"] == 0 and plain["sensitivity"] is None
    flags = {name: post_points(client, keys["owner"], m["id"], stamps, values).get_json()["is_anomaly"][150]
             for name, m in (("plain", plain), ("quiet", quiet), ("relative", relative), ("dull", dull))}
    assert flags == {"plain": True, "quiet": False, "relative": False, "dull": False}
    changed = client.patch(f"/monitors/{plain['id']}", headers=keys["owner"], json={"min_deviation": 2.5})
    assert changed.status_code == 200 and changed.get_json()["min_deviation"] == 2.5
    bad = client.patch(f"/monitors/{plain['id']}", headers=keys["owner"], json={"sensitivity": 120})
    assert bad.status_code == 400 and bad.get_json()["error"]["details"]["field"] == "sensitivity"


def test_feedback_marks_a_point_normal_and_the_detector_learns_it(client: FlaskClient, keys: dict) -> None:
    noise, rng_walk = random.Random(5), [100.0]
    for i in range(1, 300):  # a random walk (the last value predicts it best) that steps up at row 200
        rng_walk.append(rng_walk[-1] + noise.gauss(0, 1) + (60 if i == 200 else 0))
    stamps, values = hourly_points(rng_walk)
    told = create(client, keys["owner"], data_frequency="Hours", name="told")
    untold = create(client, keys["owner"], data_frequency="Hours", name="untold")
    for monitor in (told, untold):
        first = post_points(client, keys["owner"], monitor["id"], stamps[:201], values[:201]).get_json()
        assert first["is_anomaly"][200]
    answer = client.post(f"/monitors/{told['id']}/feedback", headers=keys["owner"],
                         json={"timestamp": stamps[200], "is_anomaly": False})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    point = answer.get_json()
    assert point["feedback"] == "not_anomaly" and point["is_anomaly"]  # the verdict given stands
    rest_told = post_points(client, keys["owner"], told["id"], stamps[201:], values[201:]).get_json()
    rest_untold = post_points(client, keys["owner"], untold["id"], stamps[201:], values[201:]).get_json()
    # Told, the next point is judged against the new level; untold, it is still beyond the range (the same
    # incident, so not news).
    assert rest_told["lower_bound"][0] <= values[201] <= rest_told["upper_bound"][0]
    assert values[201] > rest_untold["upper_bound"][0] and not rest_untold["is_anomaly"][0]
    shown = client.get(f"/monitors/{told['id']}?points=100", headers=keys["owner"]).get_json()["points"]
    assert [p["feedback"] for p in shown if p["timestamp"] == stamps[200]] == ["not_anomaly"]
    # Bad feedback changes nothing and says why.
    missing = client.post(f"/monitors/{told['id']}/feedback", headers=keys["owner"],
                          json={"timestamp": "2030-01-01T00:00:00Z", "is_anomaly": False})
    assert missing.status_code == 404
    wrong = client.post(f"/monitors/{told['id']}/feedback", headers=keys["owner"],
                        json={"timestamp": stamps[10], "is_anomaly": True})
    assert wrong.status_code == 400 and wrong.get_json()["error"]["details"]["field"] == "is_anomaly"
    garbled = client.post(f"/monitors/{told['id']}/feedback", headers=keys["owner"],
                          json={"timestamp": "yesterday", "is_anomaly": False})
    assert garbled.status_code == 422
    reader = client.post(f"/monitors/{told['id']}/feedback", headers=keys["reader"],
                         json={"timestamp": stamps[10], "is_anomaly": False})
    assert reader.status_code == 403


def test_an_open_incident_shows_its_start_latest_anomaly_count_and_peak(client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    monitor = create(client, owner, name="incident view")
    stamps, values = minute_series(190)
    values[150] += 20
    values[152] += 35
    flagged = [i for i, a in enumerate(post_points(client, owner, monitor["id"], stamps, values).json["is_anomaly"])
               if a]
    assert flagged[0] == 150 and 152 in flagged
    view = client.get(f"/monitors/{monitor['id']}", headers=owner).json
    incident = view["open_incident"]  # fewer than 48 quiet points since: still open
    assert incident["started_at"] == stamps[150] and incident["last_anomaly_at"] == stamps[flagged[-1]]
    assert incident["anomalous_points"] == len(flagged)
    assert incident["peak"]["timestamp"] == stamps[152] and incident["peak"]["value"] == values[152]
    series = client.get(f"/monitors/{monitor['id']}/series", headers=owner).json["series"]
    assert series[0]["open_incident"] == incident
    stamps, values = minute_series(48, start=190)
    post_points(client, owner, monitor["id"], stamps, values)
    assert client.get(f"/monitors/{monitor['id']}", headers=owner).json["open_incident"] is None


def test_feedback_on_the_open_incidents_last_anomaly_closes_it_with_its_end_events(
        client: FlaskClient, keys: dict, monitor_app: Flask) -> None:
    """Marking the newest point normal left it in open_anomalies, the incident open and its alert firing."""
    noise, walk = random.Random(7), [100.0]
    for _ in range(1, 201):
        walk.append(walk[-1] + noise.gauss(0, 1))
    walk[-1] += 60
    stamps, values = hourly_points(walk)
    monitor = create(client, keys["owner"], data_frequency="Hours", name="closed by a person",
                     webhook_url=f"http://127.0.0.1:{free_port()}/hook")
    judged = post_points(client, keys["owner"], monitor["id"], stamps, values).get_json()
    assert judged["is_anomaly"][-1]
    opened = client.get(f"/monitors/{monitor['id']}", headers=keys["owner"]).get_json()
    assert [p["timestamp"] for p in opened["open_anomalies"]] == [stamps[-1]]
    told = client.post(f"/monitors/{monitor['id']}/feedback", headers=keys["owner"],
                       json={"timestamp": stamps[-1], "is_anomaly": False})
    assert told.status_code == 200
    assert client.get(f"/monitors/{monitor['id']}", headers=keys["owner"]).get_json()["open_anomalies"] == []
    with services_of(monitor_app).database.transaction() as connection:
        events = [(e.kind, json.loads(e.payload)) for e in connection.execute(
            select(monitor_events_table).where(monitor_events_table.c.monitor_id == monitor["id"])
            .order_by(monitor_events_table.c.seq))]
    assert [kind for kind, _ in events] == ["anomaly", "anomaly_ended"]
    run = events[1][1]["run"]
    # Every anomaly of it was marked normal: no peak is left.
    assert run == {"started_at": stamps[-1], "ended_at": stamps[-1], "anomalous_points": 1, "peak": None,
                   "closed_by": "feedback"}
    # A second word on the same point changes nothing more.
    client.post(f"/monitors/{monitor['id']}/feedback", headers=keys["owner"],
                json={"timestamp": stamps[-1], "is_anomaly": False})
    with services_of(monitor_app).database.transaction() as connection:
        assert connection.execute(select(func.count()).select_from(monitor_events_table).where(
            monitor_events_table.c.monitor_id == monitor["id"])).scalar_one() == 2


def test_feedback_on_a_point_of_the_last_append_is_relearnt_without_a_rebuild(
        client: FlaskClient, keys: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alternating a one-point append and feedback on it rebuilt the state from the stored points at every
    append (84-93 ms of web CPU on 10,000 points): the state now relearns the last append by replaying it."""
    from app.monitors import store

    rebuilds: list[str] = []
    real = store.newest_points
    monkeypatch.setattr(store, "newest_points", lambda connection, series: (
        rebuilds.append(series.monitor_id), real(connection, series))[1])
    noise, walk = random.Random(11), [100.0]
    for i in range(1, 320):  # a random walk that steps up at row 300
        walk.append(walk[-1] + noise.gauss(0, 1) + (60 if i == 300 else 0))
    stamps, values = hourly_points(walk)
    told = create(client, keys["owner"], data_frequency="Hours", name="told often")
    untold = create(client, keys["owner"], data_frequency="Hours", name="never told")

    def feedback(index: int) -> None:
        answer = client.post(f"/monitors/{told['id']}/feedback", headers=keys["owner"],
                             json={"timestamp": stamps[index], "is_anomaly": False})
        assert answer.status_code == 200

    for monitor in (told, untold):
        post_points(client, keys["owner"], monitor["id"], stamps[:290], values[:290])
    feedback(100)  # the first word on this monitor: rebuilt once, at the next append
    verdicts: dict[str, list[bool]] = {"told": [], "untold": []}
    for index in range(290, 305):
        for name, monitor in (("told", told), ("untold", untold)):
            answer = post_points(client, keys["owner"], monitor["id"], [stamps[index]], [values[index]]).get_json()
            verdicts[name].append(answer["is_anomaly"][0])
        if verdicts["told"][-1]:
            feedback(index)
    # Built at its first append, rebuilt once after the first word; never again for words on its last append.
    assert rebuilds.count(told["id"]) == 2 and rebuilds.count(untold["id"]) == 1
    # The step was flagged once, marked normal, and relearnt as the new level: the rows after it are normal.
    assert verdicts["told"][10] and not any(verdicts["told"][11:])
    assert verdicts["untold"][10]


def test_points_take_a_space_for_the_t_and_leave_out_null_values(client: FlaskClient, keys: dict) -> None:
    owner = keys["writer"]
    created = client.post("/monitors", json={"name": "spaced", "data_frequency": "Minutes"}, headers=owner)
    monitor_id = created.get_json()["id"]
    stamps = [f"2026-01-01 00:{m:02d}:00" for m in range(20)]
    values: list[float | None] = [float(10 + m % 3) for m in range(20)]
    values[4] = values[9] = None
    answer = client.post(f"/monitors/{monitor_id}/points", json={"timestamps": stamps, "values": values},
                         headers=owner)
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    assert body["missing_values"] == 2 and body["new_points"] == 18
    assert "2026-01-01T00:04:00Z" not in body["timestamps"] and body["timestamps"][0] == "2026-01-01T00:00:00Z"
    # The same instant in the T form is the stored point: a retry is a no-op.
    again = client.post(f"/monitors/{monitor_id}/points", json={"timestamps": ["2026-01-01T00:19:00"],
                                                                 "values": [values[19]]}, headers=owner)
    assert again.status_code == 200 and again.get_json()["duplicate_points"] == 1
    nothing = client.post(f"/monitors/{monitor_id}/points", json={"timestamps": ["2026-01-01 00:30:00"],
                                                                   "values": [None]}, headers=owner)
    assert nothing.status_code == 422 and nothing.get_json()["error"]["details"]["field"] == "values"
