"""Prometheus remote write in (POST /api/v1/write), in-process on SQLite and PostgreSQL: bodies built with the same
generated protobuf messages and snappy block format Prometheus sends; routing by each monitor's selector; every
sample stored once or counted and dropped; malformed bodies refused whole (400) with nothing stored."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from typing import Any

import cramjam
import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy import func, select

from app.monitors.intake.prompb.remote_pb2 import WriteRequest
from app.monitors.records import monitor_events_table, monitor_points_table
from tests.support import build_app, minute_series, new_key, services_of, settings_for

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}
STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def rw_app(module_database_url: str) -> Iterator[Flask]:
    app = build_app(settings_for(module_database_url, max_points=5000, allow_private_webhooks=True),
                    start_workers=True)
    yield app
    app.extensions["monitors"].sender.stop()
    services_of(app).close()


@pytest.fixture(scope="module")
def keys(rw_app: Flask) -> dict[str, dict[str, str]]:
    def key(permissions: tuple[str, ...], account: str = "acct-rw", **limits: int) -> dict[str, str]:
        plain, _ = new_key(rw_app, permissions=permissions, account_id=account, **{**BIG_LIMITS, **limits})
        return {"Authorization": f"Bearer {plain}"}

    return {"writer": key(("read", "write")), "reader": key(("read",)),
            "other": key(("read", "write"), account="acct-rw-other"),
            "slow": key(("read", "write"), per_minute=1)}


@pytest.fixture
def client(rw_app: Flask) -> FlaskClient:
    return rw_app.test_client()


def series(labels: dict[str, str], samples: list[tuple[int, float]]) -> dict[str, Any]:
    return {"labels": labels, "samples": samples}


def body_of(*all_series: dict[str, Any]) -> bytes:
    request = WriteRequest()
    for item in all_series:
        ts = request.timeseries.add()
        for name, value in sorted(item["labels"].items()):
            label = ts.labels.add()
            label.name, label.value = name, value
        for timestamp, value in item["samples"]:
            sample = ts.samples.add()
            sample.timestamp, sample.value = timestamp, value
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def write(client: FlaskClient, headers: dict[str, str], body: bytes, **extra: str) -> Any:
    return client.post("/api/v1/write", data=body, headers={
        **headers, "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0", **extra})


def create(client: FlaskClient, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    response = client.post("/monitors", json={"name": "rw", "data_frequency": "Minutes", **fields}, headers=headers)
    assert response.status_code == 201, response.json
    return response.json


def points_of(client: FlaskClient, headers: dict[str, str], monitor_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/monitors/{monitor_id}?points=10000", headers=headers)
    assert response.status_code == 200, response.json
    return response.json["points"]


def counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("forecast_remote_write_samples_total", {"outcome": outcome}) or 0.0


def minutes(count: int, start: int = 0, value: Any = None) -> list[tuple[int, float]]:
    _, values = minute_series(count, start)
    return [(T0_MS + (start + i) * 60_000, values[i] if value is None else value(i)) for i in range(count)]


def test_the_selector_is_checked_at_create_and_patch(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    created = create(client, writer, remote_write_selector='http_requests_total{job="api", instance=~"web-.*"}')
    assert created["remote_write_selector"] == 'http_requests_total{job="api", instance=~"web-.*"}'
    for bad, words in [('{job="api"', "closing"), ("{}", "metric name or at least one"),
                       ('{job!="x"}', "empty string"), ('{job=~"a(?=b)"}', "RE2 syntax"),
                       ('{job=~"("}', "invalid regular expression"), ('rate(x[5m])', "expected '{'"),
                       ('{job="a"} offset 5m', "only a series selector"), ('{1job="a"}', "label name"),
                       ("   ", "blank")]:
        answer = client.post("/monitors", json={"name": "x", "data_frequency": "Minutes",
                                                "remote_write_selector": bad}, headers=writer)
        assert answer.status_code == 400, (bad, answer.json)
        assert answer.json["error"]["details"]["field"] == "remote_write_selector"
        assert words in answer.json["error"]["message"], (bad, answer.json)
        patched = client.patch(f"/monitors/{created['id']}", json={"remote_write_selector": bad}, headers=writer)
        assert patched.status_code == 400, (bad, patched.json)
    reader = client.post("/monitors", json={"name": "p", "data_frequency": "Minutes",
                                            "prometheus_url": "https://prometheus.example.com",
                                            "prometheus_query": "up", "remote_write_selector": '{job="a"}'},
                         headers=writer)
    assert reader.status_code == 400 and "Prometheus-backed" in reader.json["error"]["message"]
    cleared = client.patch(f"/monitors/{created['id']}", json={"remote_write_selector": None}, headers=writer)
    assert cleared.status_code == 200 and cleared.json["remote_write_selector"] is None


def test_series_are_routed_by_selector_and_judged_as_pushed_points(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    api = create(client, writer, remote_write_selector='{__name__="rq_total", job="api-route"}')
    web = create(client, writer, remote_write_selector='rq_total{job=~"web-route|www-route"}')
    twin = create(client, writer)  # the same points pushed: the verdicts must be the same
    other_account = create(client, keys["other"], remote_write_selector='{__name__="rq_total", job="api-route"}')
    unmatched_before = counted("unmatched")
    api_samples, web_samples = minutes(40), minutes(40, value=lambda i: 100.0 + i % 7)
    answer = write(client, writer, body_of(
        series({"__name__": "rq_total", "job": "api-route", "instance": "a:1"}, api_samples),
        series({"__name__": "rq_total", "job": "web-route"}, web_samples),
        series({"__name__": "rq_total", "job": "batch-route"}, minutes(5)),
        series({"__name__": "other_total", "job": "api-route"}, minutes(3)),
    ))
    assert answer.status_code == 204, answer.data
    assert answer.headers["X-Samples-Stored"] == "80" and answer.headers["X-Samples-Dropped"] == "8"
    assert counted("unmatched") - unmatched_before == 8
    stored = points_of(client, writer, api["id"])
    assert [p["value"] for p in stored] == [v for _, v in api_samples]
    assert stored[0]["timestamp"] == "2026-01-01T00:00:00Z" and stored[1]["timestamp"] == "2026-01-01T00:01:00Z"
    assert [p["value"] for p in points_of(client, writer, web["id"])] == [v for _, v in web_samples]
    assert points_of(client, keys["other"], other_account["id"]) == []  # another account's key wrote nothing there
    pushed = client.post(f"/monitors/{twin['id']}/points", headers=writer, json={
        "timestamps": [p["timestamp"] for p in stored], "values": [p["value"] for p in stored]})
    assert pushed.status_code == 200
    assert [p["anomaly_score"] for p in stored] == pushed.json["anomaly_score"]
    assert [p["expected"] for p in stored] == pushed.json["expected"]

    # Prometheus retries a batch it got no answer for: nothing is stored or judged twice.
    duplicates_before = counted("duplicate")
    again = write(client, writer, body_of(
        series({"__name__": "rq_total", "job": "api-route", "instance": "a:1"}, api_samples)))
    assert again.status_code == 204 and again.headers["X-Samples-Stored"] == "40"
    assert counted("duplicate") - duplicates_before == 40
    assert len(points_of(client, writer, api["id"])) == 40


def test_odd_samples_are_counted_and_dropped_and_the_rest_stored(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="odd_metric"}')
    labels = {"__name__": "odd_metric"}
    first = minutes(10)
    assert write(client, writer, body_of(series(labels, first))).status_code == 204
    before = {o: counted(o) for o in ("stale_marker", "nan", "not_finite", "out_of_range", "out_of_order",
                                      "conflict", "same_second", "bad_timestamp", "duplicate")}
    samples = [
        (first[3][0], first[3][1]),  # stored already, same value: a duplicate
        (first[4][0], first[4][1] + 1),  # stored already, another value: a conflict
        (T0_MS + 10 * 60_000, STALE_NAN), (T0_MS + 11 * 60_000, math.nan), (T0_MS + 12 * 60_000, math.inf),
        (T0_MS + 13 * 60_000, -1e301),
        (T0_MS + 14 * 60_000, 5.0), (T0_MS + 14 * 60_000 + 500, 6.0),  # two in one whole second
        (T0_MS + 15 * 60_000, 7.0),
        (-62_135_596_801_000 - 1000, 1.0),  # before the year 1
    ]
    answer = write(client, writer, body_of(series(labels, samples)))
    assert answer.status_code == 204, answer.data
    assert answer.headers["X-Samples-Stored"] == "3"  # the duplicate, 5.0 and 7.0
    delta = {o: counted(o) - before[o] for o in before}
    assert delta == {"stale_marker": 1, "nan": 1, "not_finite": 1, "out_of_range": 1, "out_of_order": 0,
                     "conflict": 1, "same_second": 1, "bad_timestamp": 1, "duplicate": 1}
    stored = points_of(client, writer, monitor["id"])
    assert [p["value"] for p in stored] == [v for _, v in first] + [5.0, 7.0]

    # Older than the newest stored and never stored: out of order, dropped; a newer one in the same body is kept.
    late = write(client, writer, body_of(series(labels, [(T0_MS + 10 * 60_000, 1.0), (T0_MS + 16 * 60_000, 8.0)])))
    assert late.status_code == 204 and late.headers["X-Samples-Stored"] == "1"
    assert counted("out_of_order") - before["out_of_order"] == 1
    assert [p["value"] for p in points_of(client, writer, monitor["id"])][-1] == 8.0


def series_of(client: FlaskClient, headers: dict[str, str], monitor_id: str) -> dict[str, dict[str, Any]]:
    """The monitor's series by their ``instance`` label, each with its points."""
    listed = client.get(f"/monitors/{monitor_id}/series?points=1000", headers=headers)
    assert listed.status_code == 200, listed.json
    return {s["labels"].get("instance", ""): s for s in listed.json["series"]}


def test_each_label_set_a_selector_matches_is_a_series_of_its_own(client: FlaskClient, keys: dict,
                                                                    rw_app: Flask) -> None:
    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="fleet_up"}',
                     alertmanager_url="http://127.0.0.1:9")
    spiked = minutes(60, value=lambda i: 10 + 3 * math.sin(i / 15) + (60 if i == 55 else 0))
    answer = write(client, writer, body_of(*(series({"__name__": "fleet_up", "instance": name, "job": "api"},
                                                    spiked if name == "c" else minutes(60)) for name in "abc")))
    assert answer.status_code == 204 and answer.headers["X-Samples-Stored"] == "180"
    found = series_of(client, writer, monitor["id"])
    assert sorted(found) == ["a", "b", "c"]
    for name, one in found.items():
        assert one["labels"] == {"__name__": "fleet_up", "instance": name, "job": "api"}
        assert one["point_count"] == 60 and len(one["points"]) == 60
        assert [p["timestamp"] for p in one["points"]] == minute_series(60)[0]
        assert any(p["is_anomaly"] for p in one["points"]) == (name == "c")
    # Each series is judged as a monitor of its own would judge it.
    twin = create(client, writer)
    alone = client.post(f"/monitors/{twin['id']}/points", headers=writer, json={
        "timestamps": minute_series(60)[0], "values": [v for _, v in spiked]}).json
    assert [p["anomaly_score"] for p in found["c"]["points"]] == alone["anomaly_score"]

    view = client.get(f"/monitors/{monitor['id']}?points=5", headers=writer).json
    assert view["series_count"] == 3 and view["point_count"] == 180 and view["points"] == []
    assert {s["id"] for s in view["series"]} == {s["id"] for s in found.values()}
    assert all(len(s["points"]) == 5 for s in view["series"])
    assert {p["series_id"] for p in view["open_anomalies"]} <= {found["c"]["id"]}
    one = client.get(f"/monitors/{monitor['id']}/series/{found['c']['id']}?points=3", headers=writer).json
    assert one["labels"]["instance"] == "c" and len(one["points"]) == 3 and one["monitor_id"] == monitor["id"]
    assert client.get(f"/monitors/{monitor['id']}/series/{found['c']['id'] + 10_000}",
                      headers=writer).status_code == 404
    assert client.get(f"/monitors/{twin['id']}/series/{found['c']['id']}", headers=writer).status_code == 404
    matched = client.get(f"/monitors/{monitor['id']}/series", query_string={"match": '{instance=~"a|b"}'},
                         headers=writer).json["series"]
    assert sorted(s["labels"]["instance"] for s in matched) == ["a", "b"]
    assert client.get(f"/monitors/{monitor['id']}/series?match=%7B", headers=writer).status_code == 400
    # A forecast and feedback name their series on a monitor of several.
    assert client.get(f"/monitors/{monitor['id']}?horizon=3", headers=writer).status_code == 400
    ahead = client.get(f"/monitors/{monitor['id']}/series/{found['a']['id']}?horizon=3", headers=writer)
    assert ahead.status_code == 200 and len(ahead.json["forecast"]["median"]) == 3

    # The Alertmanager alert of the spike carries its series' labels, not __name__; the other series raised none.
    with services_of(rw_app).database.transaction() as connection:
        events = list(connection.execute(select(monitor_events_table).where(
            monitor_events_table.c.monitor_id == monitor["id"])))
    assert events and {e.series_id for e in events} == {found["c"]["id"]}
    alert = json.loads(events[0].payload)["alert"]
    assert alert["labels"] == {"alertname": "MonitorAnomaly", "monitor_id": monitor["id"], "monitor_name": "rw",
                               "instance": "c", "job": "api", "series_id": str(found["c"]["id"])}
    assert alert["annotations"]["series"] == f"/monitors/{monitor['id']}/series/{found['c']['id']}"
    assert json.loads(events[0].payload)["series"] == {"id": found["c"]["id"], "labels": found["c"]["labels"]}

    # GET /monitors/metrics: one line per series per gauge, with its labels.
    admin, _ = new_key(rw_app, permissions=("admin",), account_id="acct-rw")
    text = client.get("/monitors/metrics", headers={"Authorization": f"Bearer {admin}"}).get_data(as_text=True)
    for name in "abc":
        assert (f'forecast_monitor_value{{monitor_id="{monitor["id"]}",monitor_name="rw",instance="{name}",'
                f'job="api",series_id="{found[name]["id"]}"}}') in text
    assert f'forecast_monitor_series{{monitor_id="{monitor["id"]}",monitor_name="rw"}} 3' in text


def test_a_monitor_follows_at_most_its_cap_of_series_and_counts_the_rest(module_database_url: str) -> None:
    app = build_app(settings_for(module_database_url, max_series_per_monitor=2))
    try:
        client = app.test_client()
        plain, _ = new_key(app, permissions=("read", "write"), account_id="acct-cap", **BIG_LIMITS)
        writer = {"Authorization": f"Bearer {plain}"}
        monitor = create(client, writer, remote_write_selector='{__name__="capped"}')
        before = counted("series_limit")
        first = write(client, writer, body_of(*(series({"__name__": "capped", "instance": name}, minutes(5))
                                                for name in "abc")))
        assert first.status_code == 204 and first.headers["X-Samples-Stored"] == "10"
        assert first.headers["X-Samples-Dropped"] == "5"
        assert counted("series_limit") - before == 5
        assert sorted(series_of(client, writer, monitor["id"])) == ["a", "b"]  # the first label sets, in order
        later = write(client, writer, body_of(series({"__name__": "capped", "instance": "c"}, minutes(2, 5)),
                                              series({"__name__": "capped", "instance": "a"}, minutes(2, 5))))
        assert later.headers["X-Samples-Stored"] == "2" and later.headers["X-Samples-Dropped"] == "2"
        view = client.get(f"/monitors/{monitor['id']}", headers=writer).json
        assert view["series_count"] == 2 and view["series_refused"] == 7 and view["series_refused_at"]
        # A labelled push to a full monitor is refused as clearly, naming the cap.
        pushed = client.post(f"/monitors/{monitor['id']}/points", headers=writer, json={
            "timestamps": ["2026-01-01T00:00:00Z"], "values": [1.0], "labels": {"instance": "d"}})
        assert pushed.status_code == 422 and pushed.json["error"]["details"]["field"] == "labels"
        assert "MAX_SERIES_PER_MONITOR" in pushed.json["error"]["message"]
    finally:
        app.extensions["monitors"].sender.stop()
        services_of(app).close()


def test_odd_samples_of_a_series_among_several_are_counted_and_change_no_other(client: FlaskClient,
                                                                               keys: dict) -> None:
    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="odd_fleet"}')
    good, odd = {"__name__": "odd_fleet", "instance": "good"}, {"__name__": "odd_fleet", "instance": "odd"}
    assert write(client, writer, body_of(series(good, minutes(10)), series(odd, minutes(10)))).status_code == 204
    before = {o: counted(o) for o in ("stale_marker", "nan", "out_of_order", "conflict", "duplicate")}
    answer = write(client, writer, body_of(
        series(odd, [(T0_MS + 3 * 60_000, minutes(10)[3][1]), (T0_MS + 4 * 60_000, 99.0),
                     (T0_MS + 10 * 60_000, STALE_NAN), (T0_MS + 11 * 60_000, math.nan)]),
        series(good, minutes(2, 10))))
    assert answer.status_code == 204 and answer.headers["X-Samples-Stored"] == "3"
    assert {o: counted(o) - before[o] for o in before} == {"stale_marker": 1, "nan": 1, "out_of_order": 0,
                                                           "conflict": 1, "duplicate": 1}
    found = series_of(client, writer, monitor["id"])
    assert found["good"]["point_count"] == 12 and found["odd"]["point_count"] == 10


def test_malformed_bodies_are_400_and_store_nothing(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="fragile"}')
    good = body_of(series({"__name__": "fragile"}, minutes(20)))
    raw = WriteRequest()
    raw.ParseFromString(bytes(cramjam.snappy.decompress_raw(good)))
    cases = {
        "truncated snappy": good[: len(good) // 2],
        "corrupt snappy": good[:3] + bytes(b ^ 0x5A for b in good[3:]),
        "not snappy": b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        "uncompressed protobuf": raw.SerializeToString(),
        "snappy of garbage": bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 40)),
        "empty": b"",
    }
    for name, body in cases.items():
        answer = write(client, writer, body)
        assert answer.status_code == 400, (name, answer.status_code, answer.data)
        assert answer.json["error"]["code"] == "INVALID_REQUEST", name
    assert points_of(client, writer, monitor["id"]) == []

    huge = b"\xff\xff\xff\xff\x0f" + b"\x00" * 16  # declares 4 GiB decoded
    assert write(client, writer, huge).status_code == 413
    assert write(client, writer, good, **{"Content-Encoding": "gzip"}).status_code == 415
    assert write(client, writer, good, **{"Content-Type": "application/json"}).status_code == 415
    assert client.post("/api/v1/write", data=good, headers={"Content-Encoding": "snappy"}).status_code == 401
    assert write(client, keys["reader"], good).status_code == 403
    assert points_of(client, writer, monitor["id"]) == []
    assert write(client, writer, good).status_code == 204  # and the service is still up
    assert len(points_of(client, writer, monitor["id"])) == 20


def test_huge_label_sets_are_dropped_and_counted(client: FlaskClient, keys: dict) -> None:
    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="wide"}')
    before = counted("labels_too_large")
    many = {"__name__": "wide", **{f"label_{i:05d}": str(i) for i in range(10_000)}}
    answer = write(client, writer, body_of(series(many, minutes(2)),
                                           series({"__name__": "wide", "blob": "x" * (1 << 20)}, minutes(2)),
                                           series({"__name__": "wide", "job": "fine"}, minutes(4))))
    assert answer.status_code == 204, answer.data
    assert counted("labels_too_large") - before == 4
    assert len(points_of(client, writer, monitor["id"])) == 4
    nameless = write(client, writer, body_of(series({"job": "no-name"}, minutes(1))))
    assert nameless.status_code == 204 and nameless.headers["X-Samples-Dropped"] == "1"


def test_the_rate_limit_answers_429_which_prometheus_retries(client: FlaskClient, keys: dict) -> None:
    body = body_of(series({"__name__": "limited"}, minutes(1)))
    assert write(client, keys["slow"], body).status_code == 204
    limited = write(client, keys["slow"], body)
    assert limited.status_code == 429 and "Retry-After" in limited.headers


def test_entries_with_equal_labels_are_one_series(client: FlaskClient, keys: dict) -> None:
    # Prometheus sends each sample as its own TimeSeries entry, the labels repeated (and not always in time order
    # across entries).
    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="split_up"}')
    samples = minutes(6)
    entries = [series({"__name__": "split_up", "instance": "a"}, [sample]) for sample in samples]
    answer = write(client, writer, body_of(*entries[3:], *entries[:3]))
    assert answer.status_code == 204 and answer.headers["X-Samples-Stored"] == "6"
    assert [p["value"] for p in points_of(client, writer, monitor["id"])] == [v for _, v in samples]


def test_series_that_stop_coming_are_retired_and_their_incident_ends(client: FlaskClient, keys: dict,
                                                                     rw_app: Flask) -> None:
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from app.monitors.records import monitor_series_table
    from app.monitors.retirement import retire_series

    writer = keys["writer"]
    monitor = create(client, writer, remote_write_selector='{__name__="coming_going"}',
                     webhook_url="http://127.0.0.1:9/hook")
    spiked = minutes(60, value=lambda i: 10 + 3 * math.sin(i / 15) + (60 if i == 59 else 0))
    assert write(client, writer, body_of(series({"__name__": "coming_going", "instance": "stays"}, minutes(60)),
                                         series({"__name__": "coming_going", "instance": "goes"}, spiked))
                 ).status_code == 204
    pushed = client.post(f"/monitors/{monitor['id']}/points", headers=writer, json={
        "timestamps": minute_series(3)[0], "values": [1.0, 2.0, 3.0]})  # the monitor's unlabelled series
    assert pushed.status_code == 200
    found = series_of(client, writer, monitor["id"])
    assert found["goes"]["open_anomaly_since"] is not None
    database = services_of(rw_app).database
    long_ago = datetime.now(UTC) - timedelta(days=2)
    with database.transaction() as connection:  # what two days without a sample look like
        connection.execute(update(monitor_series_table).where(
            monitor_series_table.c.id.in_([found["goes"]["id"], found[""]["id"]])).values(last_seen_at=long_ago))
    assert retire_series(database, retire_seconds=86_400) == 1
    assert retire_series(database, retire_seconds=86_400) == 0
    left = series_of(client, writer, monitor["id"])
    assert sorted(left) == ["", "stays"]  # the unlabelled series is the monitor's own: never retired
    with database.transaction() as connection:
        stored = connection.execute(select(func.count()).select_from(monitor_points_table).where(
            monitor_points_table.c.series_id == found["goes"]["id"])).scalar()
    assert stored == 0
    ended = [d for d in client.get(f"/monitors/{monitor['id']}/deliveries", headers=writer).json["deliveries"]
             if d["type"] == "anomaly_ended"]
    assert len(ended) == 1 and ended[0]["series_id"] == found["goes"]["id"]
    with database.transaction() as connection:
        event = connection.execute(select(monitor_events_table).where(
            monitor_events_table.c.id == ended[0]["event_id"])).first()
        assert event is not None
        run = json.loads(event.payload)["run"]
    assert run["closed_by"] == "retired" and run["anomalous_points"] >= 1
    assert run["peak"]["value"] > 60  # the spike: its furthest anomaly
    # The label set comes back: a new series, warming up afresh.
    again = write(client, writer, body_of(series({"__name__": "coming_going", "instance": "goes"}, minutes(2, 60))))
    assert again.status_code == 204 and again.headers["X-Samples-Stored"] == "2"
    back = series_of(client, writer, monitor["id"])["goes"]
    assert back["id"] != found["goes"]["id"] and back["point_count"] == 2
