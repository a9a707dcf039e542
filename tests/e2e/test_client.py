"""The Python client (clients/python, package forecast_client) against a real gunicorn server.

One server for the whole module. Its database holds five keys: a generous read key, a write-only key (for
403), an admin key (the /keys calls), a read-write-delete key (the monitors) and a 3-per-minute key whose
three requests are spent as the server starts, so that by the time the rate-limit test (last in this file)
runs, most of its minute has gone by.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import forecast_client
import httpx
import numpy as np
import pandas as pd
import pytest
from forecast_client import (
    APIConnectionError,
    APITimeoutError,
    AsyncClient,
    Client,
    DataValidationError,
    ForecastResult,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    Unauthorized,
)

from tests.support import ROOT, Server, cli_in_process, free_port

pytestmark = pytest.mark.slow
EXAMPLE = ROOT / "clients" / "python" / "examples" / "forecast_csv.py"
MAX_BODY_BYTES = 1_000_000


@dataclass
class Running:
    server: Server
    env: dict[str, str]
    key: str
    write_only_key: str
    limited_key: str
    admin_key: str
    owner_key: str

    @property
    def url(self) -> str:
        return self.server.url


def create_key(env: dict[str, str], *args: str) -> str:
    return json.loads(cli_in_process("keys", "create", *args, "--json", env=env).stdout)["key"]


def hourly_series(points: int = 240, *, start: str = "2026-01-05", tz: str | None = None) -> pd.Series:
    index = pd.date_range(start, periods=points, freq="h", tz=tz)
    t = np.arange(points)
    values = 100 + 0.05 * t + 10 * np.sin(2 * np.pi * t / 24) + np.random.default_rng(7).normal(0, 1, points)
    return pd.Series(np.round(values, 3), index=index, name="load")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("client")
    env = {
        "DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}",
        "FORECAST_WORKERS": "1",
        "USAGE_FLUSH_SECONDS": "1",
        "MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "LOG_LEVEL": "INFO",
        "ALLOW_PRIVATE_WEBHOOKS": "1",  # the webhook receiver below listens on loopback
    }
    cli_in_process("db", "upgrade", env=env)
    key = create_key(env, "--permissions", "read", "--per-minute", "1000", "--per-hour", "5000")
    write_only_key = create_key(env, "--permissions", "write")
    limited_key = create_key(env, "--permissions", "read", "--per-minute", "3")
    admin_key = create_key(env, "--permissions", "read,write,admin", "--per-minute", "1000")
    owner_key = create_key(env, "--permissions", "read,write,delete", "--per-minute", "1000")
    server = Server(env, log_path=directory / "gunicorn.log")
    try:
        server.wait_ready()
        for _ in range(3):
            # GET /models is not counted; a forecast is, whatever its answer.
            assert httpx.post(server.url + "/forecast", json={}, headers={"Authorization": f"Bearer {limited_key}"},
                              timeout=10).status_code == 400
        yield Running(server, env, key, write_only_key, limited_key, admin_key, owner_key)
    finally:
        server.stop()


@pytest.fixture
def client(running: Running) -> Iterator[Client]:
    with Client(running.url, running.key, max_retries=2, backoff_base=0.05) as opened:
        yield opened


def raw_forecast(running: Running, body: dict, model: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {running.key}"}
    if model:
        headers["X-Model-Id"] = model
    return httpx.post(running.url + "/forecast", json=body, headers=headers, timeout=60)


def assert_ordered(result: ForecastResult, horizon: int) -> None:
    assert len(result) == len(result.median) == len(result.lower) == len(result.upper) == horizon
    for low, mid, high in zip(result.lower, result.median, result.upper, strict=True):
        assert math.isfinite(low) and low <= mid <= high


# -- the calls ---------------------------------------------------------------------------------------------


def test_verify_reports_permissions_and_the_live_window(running: Running, client: Client) -> None:
    before = time.time()
    result = client.verify()
    after = time.time()
    assert result.valid and result.permissions == ("read",)
    assert result.rate_limit.limit == 1000
    assert 0 <= result.rate_limit.remaining <= 1000
    # The window's oldest request plus a minute, rounded up: that request came at the latest with this one.
    assert before - 1 <= result.rate_limit.reset <= after + 61
    assert abs(result.timestamp.timestamp() - before) < 30
    assert result.request_id and len(result.request_id) == 32
    assert client.rate_limit is not None and client.rate_limit.limit == 1000  # from the headers


def test_models_lists_every_model_the_service_offers(client: Client) -> None:
    models = client.models()
    assert [m.id for m in models] == [f"forecast-model-{n}" for n in range(1, 5)]
    assert all(m.description for m in models)


def test_hourly_series_round_trip_sends_exactly_the_service_form(running: Running, client: Client) -> None:
    series = hourly_series()
    result = client.forecast(series, 24, confidence=0.9)
    assert_ordered(result, 24)
    assert result.frequency == "Hours" and result.confidence == 0.9
    assert result.model == "forecast-model-1" and result.fallback is None and result.warning is None
    assert result.rate_limit is not None and result.rate_limit.limit == 1000
    assert result.timestamps[0] == "2026-01-15T00:00:00"  # 240 hours after 2026-01-05T00:00:00, no suffix

    frame = result.to_pandas()
    expected_index = pd.date_range(series.index[-1] + pd.Timedelta(hours=1), periods=24, freq="h")
    assert list(frame.columns) == ["median", "lower", "upper"]
    assert frame.index.name == "timestamp" and frame.index.tz is None
    assert (frame.index == expected_index).all()
    assert frame["median"].tolist() == result.median

    # The same request written by hand gives the same numbers: the client sent what the contract asks.
    body = {
        "series": [{"timestamps": [t.strftime("%Y-%m-%dT%H:%M:%S") for t in series.index],
                    "values": series.tolist()}],
        "forecast_horizon": 24, "data_frequency": "Hours", "forecast_frequency": "Hours", "confidence": 0.9,
    }
    by_hand = raw_forecast(running, body).json()
    assert by_hand["median"] == result.median and by_hand["lower_bound"] == result.lower
    assert by_hand["forecast_timestamps"] == result.timestamps


def test_month_end_series_stays_on_month_ends(client: Client) -> None:
    index = pd.date_range("2021-01-31", periods=48, freq="ME")
    values = 50 + 5 * np.sin(2 * np.pi * np.arange(48) / 12) + np.arange(48) * 0.3
    result = client.forecast(pd.Series(values, index=index), 12, model="forecast-model-2")
    assert result.frequency == "Monthly" and result.model == "forecast-model-2"
    assert result.timestamps[:3] == ["2025-01-31T00:00:00", "2025-02-28T00:00:00", "2025-03-31T00:00:00"]
    frame = result.to_pandas()
    assert frame.index.is_month_end.all()
    assert (frame.index == pd.date_range("2025-01-31", periods=12, freq="ME")).all()


def test_time_zoned_series_keeps_its_zone_across_daylight_saving_changes(client: Client) -> None:
    # Ends two hours before Berlin falls back from +02:00 to +01:00, so the forecast crosses the change.
    series = hourly_series(200, start="2026-10-16 18:00", tz="Europe/Berlin")
    assert str(series.index[-1]) == "2026-10-25 01:00:00+02:00"
    result = client.forecast(series, 48, model="forecast-model-2")
    assert_ordered(result, 48)
    assert result.timestamps[0] == "2026-10-25T02:00:00+02:00"  # the service continues in the last offset
    frame = result.to_pandas()
    assert str(frame.index.tz) == "Europe/Berlin"
    expected = pd.date_range(series.index[-1] + pd.Timedelta(hours=1), periods=48, freq="h")
    assert (frame.index == expected).all()
    assert frame.index[2].utcoffset() == pd.Timedelta(hours=1)  # 02:00 again, now in winter time

    # A series that crosses the spring change in its history is sent with both offsets and accepted.
    spring = hourly_series(150, start="2026-03-25", tz="Europe/Berlin")
    encoded_offsets = {t.strftime("%z") for t in spring.index}
    assert encoded_offsets == {"+0100", "+0200"}
    assert len(client.forecast(spring, 6, model="forecast-model-2")) == 6


def test_utc_five_minute_series_is_sent_with_z_and_inferred_as_minutes(client: Client) -> None:
    index = pd.date_range("2026-02-01", periods=300, freq="5min", tz="UTC")
    values = 20 + np.sin(np.arange(300) / 12.0)
    result = client.forecast(pd.Series(values, index=index), 12, model="forecast-model-2")
    assert result.frequency == "Minutes"
    assert result.timestamps[0] == "2026-02-02T01:00:00Z"
    frame = result.to_pandas()
    assert str(frame.index.tz) == "UTC"
    assert (frame.index == pd.date_range("2026-02-02T01:00:00", periods=12, freq="5min", tz="UTC")).all()


def test_pair_of_sequences_and_the_short_history_warning(client: Client) -> None:
    timestamps = [f"2026-03-{day:02d}T00:00:00+05:30" for day in range(1, 21)]
    values = [float(10 + day % 7) for day in range(20)]
    result = client.forecast((timestamps, values), 5, model="forecast-model-4")
    assert result.frequency == "Daily" and result.model == "forecast-model-4"
    assert result.timestamps == [f"2026-03-{day:02d}T00:00:00+05:30" for day in range(21, 26)]
    assert result.warning is not None and "20 points" in result.warning
    assert result.datetimes[0].utcoffset().total_seconds() == 5.5 * 3600
    # With one fixed offset in the text, the frame keeps that offset rather than switching to UTC.
    assert result.to_pandas().index[0].isoformat() == "2026-03-21T00:00:00+05:30"


def five_minute_series(points: int, *, spike_at: int, gaps: bool = False) -> pd.Series:
    """Road-sensor-like data: a daily cycle every 288 rows, optionally with holes and jitter."""
    stamps, values, t = [], [], pd.Timestamp("2026-03-01")
    for i in range(points):
        stamps.append(t)
        values.append(100 + 20 * math.sin(2 * math.pi * i / 288) + (i * 7919 % 13) / 13)
        t += pd.Timedelta(minutes=10 if gaps and i % 17 == 0 else 5, seconds=(i % 3) * 7 if gaps else 0)
    values[spike_at] += 40
    return pd.Series(values, index=pd.DatetimeIndex(stamps))


def test_detect_anomalies_finds_the_spike_in_a_gappy_series(running: Running, client: Client) -> None:
    series = five_minute_series(600, spike_at=500, gaps=True)
    assert series.index.freq is None and pd.infer_freq(series.index) is None  # holes and jitter
    result = client.detect_anomalies(series)
    assert result.frequency == "Minutes" and result.model == "anomaly-model-1" and result.confidence is None
    assert 0.99 < result.threshold < 1  # one false alarm a week of 5-minute rows
    assert result.is_anomaly == [score >= result.threshold for score in result.score]
    assert len(result) == 600 and 500 in result.anomalies and result.direction[500] == "up"
    assert result.timestamps[0] == "2026-03-01T00:00:00" and result.rate_limit is not None
    frame = result.to_pandas()
    assert list(frame.columns) == ["value", "expected", "lower", "upper", "score", "is_anomaly", "direction"]
    assert (frame.index == series.index).all() and frame["value"].tolist() == series.tolist()
    assert bool(frame["is_anomaly"].iloc[500]) and frame["score"].iloc[500] >= result.threshold

    looser = client.detect_anomalies(series, false_alarms_per_week=10)
    assert looser.confidence is None and looser.threshold < result.threshold
    assert looser.is_anomaly == [score >= looser.threshold for score in looser.score]
    assert 500 in looser.anomalies

    last = client.detect_last_anomaly(series.iloc[:501], model="anomaly-model-2", confidence=0.95)
    assert last.timestamp == result.timestamps[500] and last.value == series.iloc[500]
    assert last.is_anomaly and last.direction == "up" and last.model == "anomaly-model-2"
    assert last.lower <= last.expected <= last.upper and last.confidence == 0.95
    assert last.is_anomaly == (last.score >= last.threshold)  # anomaly-model-2: 0.5, on the range's edge
    by_confidence = client.detect_last_anomaly(series.iloc[:501], confidence=0.95)
    assert by_confidence.confidence == 0.95 and by_confidence.threshold == pytest.approx(0.95)
    by_budget = client.detect_last_anomaly(series.iloc[:501], false_alarms_per_week=10)
    assert by_budget.confidence is None and by_budget.threshold == pytest.approx(looser.threshold)
    assert by_budget.is_anomaly == (by_budget.score >= by_budget.threshold)

    with pytest.raises(InvalidRequest):  # the client sends both; the service takes one
        client.detect_anomalies(series, false_alarms_per_week=10, confidence=0.99)

    with pytest.raises(DataValidationError) as short:
        client.detect_anomalies(series.iloc[:5])
    assert short.value.issue == "insufficient data points"


def test_key_management_calls(running: Running) -> None:
    with Client(running.url, running.admin_key, max_retries=1) as admin:
        created = admin.create_key(["read"], name="reporting", per_minute=20)
        assert created.key.startswith("ak_") and len(created.key) == 67
        assert created.key not in repr(created) and created.key[3:] not in repr(created)
        assert created.permissions == ("read",) and created.limits.per_minute == 20 and created.status == "active"
        assert created.id in [k.id for k in admin.list_keys()]
        assert admin.get_key(created.id).name == "reporting"

        updated = admin.update_key(created.id, name="reports", per_minute=30)
        assert updated.name == "reports" and updated.limits.per_minute == 30

        with Client(running.url, created.key) as made:
            assert made.verify().permissions == ("read",)
            usage = admin.key_usage(created.id, hours=2)
            assert usage.key_id == created.id and usage.hours == 2
            assert [w.window for w in usage.rate_limits] == ["minute", "hour", "day"]
            assert usage.rate_limits[0].limit == 30

            rotated = admin.rotate_key(created.id, grace_seconds=0)
            assert rotated.old_key.id == created.id and rotated.old_key.rotated_to == rotated.new_key.id
            assert rotated.new_key.key != created.key and rotated.new_key.limits.per_minute == 30
            deadline = time.monotonic() + 10  # running servers trust a key lookup for up to 5 s
            while True:
                try:
                    made.verify()
                except Unauthorized:
                    break
                assert time.monotonic() < deadline, "rotated key still accepted"
                time.sleep(0.2)
        with Client(running.url, rotated.new_key.key) as replacement:
            assert replacement.verify().permissions == ("read",)
            with pytest.raises(PermissionDenied) as not_admin:
                replacement.list_keys()
            assert not_admin.value.required_permission == "admin"
        assert admin.revoke_key(rotated.new_key.id).status == "revoked"

        with pytest.raises(NotFound) as missing:
            admin.get_key("key_does_not_exist")
        assert missing.value.status_code == 404 and missing.value.code == "INVALID_REQUEST"
        with pytest.raises(PermissionDenied):
            admin.create_key(["read", "delete"])  # more than the admin key itself holds


def test_creating_a_key_is_not_repeated_once_the_request_may_have_arrived(running: Running) -> None:
    with socket.socket() as listener:  # accepts connections but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        silent = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with Client(silent, running.admin_key, timeout=0.3, max_retries=3, backoff_base=0.05) as admin:
            with pytest.raises(APITimeoutError) as lost:
                admin.create_key(["read"])  # sent; the answer never came: it may exist, so no second one
            assert lost.value.attempts == 1
            with pytest.raises(APITimeoutError) as read:
                admin.list_keys()  # a read is safe to repeat
            assert read.value.attempts == 4
    closed = f"http://127.0.0.1:{free_port()}"
    with Client(closed, running.admin_key, max_retries=2, backoff_base=0.05) as admin:
        with pytest.raises(APIConnectionError) as refused:
            admin.create_key(["read"])  # never connected: nothing was sent, so retried
        assert refused.value.attempts == 3


class WebhookReceiver:
    """A real HTTP endpoint on loopback that accepts every alert the server sends it."""

    def __init__(self) -> None:
        received: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.received = received
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/alerts"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def test_monitor_calls(running: Running) -> None:
    receiver = WebhookReceiver()
    series = five_minute_series(400, spike_at=350)
    try:
        with Client(running.url, running.owner_key, max_retries=1) as owner:
            monitor = owner.create_monitor("road sensor 7", "5min", webhook_url=receiver.url)
            assert monitor.frequency == "Minutes" and monitor.model == "anomaly-model-1"
            assert monitor.webhook_secret and monitor.webhook_secret not in repr(monitor)
            assert monitor.point_count == 0 and monitor.last_timestamp is None
            assert (monitor.false_alarms_per_week, monitor.confidence, monitor.sensitivity) == (None, None, None)

            first = owner.add_points(monitor.id, series.iloc[:380])
            assert first.new_points == 380 and first.point_count == 380 and 350 in first.anomalies
            repeated = owner.add_points(monitor.id, series.iloc[370:380])  # a retry after a lost answer
            assert repeated.new_points == 0 and repeated.duplicate_points == 10
            assert repeated.score == first.score[370:] and repeated.is_anomaly == first.is_anomaly[370:]
            rest = owner.add_points(monitor.id, series.iloc[380:])
            # A monitor writes every instant in UTC with Z, so naive input comes back as UTC.
            assert (rest.to_pandas().index == series.index[380:].tz_localize("UTC")).all() and rest.point_count == 400

            seen = owner.get_monitor(monitor.id, points=5, horizon=6, model="forecast-model-2")
            assert seen.point_count == 400 and [p.timestamp for p in seen.points] == rest.timestamps[-5:]
            assert seen.last_timestamp == rest.timestamps[-1] and seen.webhook_secret is None
            assert seen.forecast is not None and seen.forecast.model == "forecast-model-2"
            assert seen.forecast.to_pandas().index[0] == (series.index[-1] + pd.Timedelta(minutes=5)).tz_localize("UTC")
            assert monitor.id in [m.id for m in owner.list_monitors(limit=50).monitors]

            deadline = time.monotonic() + 30
            while not (log := owner.deliveries(monitor.id)) or any(d.status != "delivered" for d in log):
                assert time.monotonic() < deadline, f"alerts not delivered: {log}"
                time.sleep(0.3)
            assert "anomaly" in {d.type for d in log} and all(d.attempts[0].status_code == 200 for d in log)
            assert {d.event_id for d in log} == {event["id"] for event in receiver.received}

            secret = owner.rotate_webhook_secret(monitor.id)
            assert secret != monitor.webhook_secret and secret.startswith("whsec_")
            updated = owner.update_monitor(monitor.id, name="road sensor 7b", webhook_url=None)
            assert updated.name == "road sensor 7b" and updated.webhook_url is None
            by_confidence = owner.update_monitor(monitor.id, confidence=0.999)
            assert by_confidence.webhook_url is None  # untouched when not given
            assert (by_confidence.false_alarms_per_week, by_confidence.confidence) == (None, 0.999)
            by_budget = owner.update_monitor(monitor.id, false_alarms_per_week=2)
            assert (by_budget.false_alarms_per_week, by_budget.confidence, by_budget.sensitivity) == (2.0, None, None)
            assert by_budget.name == "road sensor 7b"

            owner.delete_monitor(monitor.id)
            with pytest.raises(NotFound):
                owner.get_monitor(monitor.id)
        with Client(running.url, running.key) as reader, pytest.raises(PermissionDenied) as denied:
            reader.create_monitor("not mine", "Hours")
        assert denied.value.required_permission == "write"
    finally:
        receiver.stop()


def test_a_monitor_of_several_series(running: Running) -> None:
    series = five_minute_series(300, spike_at=299)  # the last point: its incident is still open
    calm = series.copy()
    calm.iloc[299] = calm.iloc[298]
    with Client(running.url, running.owner_key, max_retries=1) as owner:
        monitor = owner.create_monitor("road sensors", "5min")
        stamps = [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in series.index]
        rows = [{"monitor_id": monitor.id, "timestamp": stamp, "labels": {"sensor": name}, "value": float(value)}
                for name, values in (("s7", series), ("s8", calm))
                for stamp, value in zip(stamps, values, strict=True)]
        fed = httpx.post(f"{running.url}/monitors/points", json={"points": rows}, timeout=120,
                         headers={"Authorization": f"Bearer {running.owner_key}"})
        assert fed.status_code == 200, fed.text

        seen = owner.get_monitor(monitor.id, points=5)
        assert seen.series_count == 2 and seen.point_count == 600 and seen.points == [] and seen.series_refused == 0
        by_sensor = {s.labels["sensor"]: s for s in seen.series}
        assert set(by_sensor) == {"s7", "s8"} and all(len(s.points) == 5 for s in seen.series)
        assert by_sensor["s7"].is_anomalous and not by_sensor["s8"].is_anomalous
        assert {p.series_id for p in seen.open_anomalies} == {by_sensor["s7"].id}
        page = owner.list_series(monitor.id, match='{sensor="s7"}', points=300)
        assert [s.id for s in page.series] == [by_sensor["s7"].id] and page.next_after is None
        assert 299 in [i for i, p in enumerate(page.series[0].points) if p.is_anomaly]
        one = owner.get_series(monitor.id, by_sensor["s8"].id, points=10, horizon=4)
        assert one.monitor_id == monitor.id and one.labels == {"sensor": "s8"} and len(one.points) == 10
        assert one.forecast is not None and len(one.forecast.median) == 4 and not one.open_anomalies
        assert owner.list_series(monitor.id, anomalous=True, limit=1).series[0].labels == {"sensor": "s7"}

        async def read_async() -> list[int]:
            async with AsyncClient(running.url, running.owner_key) as client:
                listed = await client.list_series(monitor.id)
                return [(await client.get_series(monitor.id, s.id)).point_count for s in listed.series]

        assert asyncio.run(read_async()) == [300, 300]
        owner.delete_monitor(monitor.id)


# -- errors from real answers ------------------------------------------------------------------------------


def test_unknown_key_raises_unauthorized_without_retrying_or_echoing_the_key(running: Running) -> None:
    bogus = "ak_" + "0" * 64
    with Client(running.url, bogus) as wrong:
        with pytest.raises(Unauthorized) as caught:
            wrong.verify()
        assert "ak_" not in repr(wrong)
    error = caught.value
    assert error.status_code == 401 and error.code == "UNAUTHORIZED" and error.attempts == 1
    assert isinstance(error.body, dict) and error.body["error"]["code"] == "UNAUTHORIZED"
    assert bogus not in str(error) and bogus not in repr(error.body)


def test_key_without_the_permission_raises_permission_denied(running: Running) -> None:
    with Client(running.url, running.write_only_key) as writer, pytest.raises(PermissionDenied) as caught:
        writer.forecast(hourly_series(), 3)
    assert caught.value.status_code == 403 and caught.value.code == "UNAUTHORIZED"
    assert caught.value.required_permission == "read" and caught.value.attempts == 1


def test_bad_request_shape_raises_invalid_request_with_the_field(client: Client) -> None:
    with pytest.raises(InvalidRequest) as caught:
        client.forecast(hourly_series(), 0)
    assert caught.value.status_code == 400 and caught.value.code == "INVALID_REQUEST"
    assert caught.value.field == "forecast_horizon" and caught.value.provided == 0
    assert caught.value.attempts == 1

    with pytest.raises(InvalidRequest) as unknown_model:
        client.forecast(hourly_series(), 3, model="forecast-model-9")
    assert unknown_model.value.field == "X-Model-Id" and "forecast-model-1" in unknown_model.value.issue


def test_body_over_the_limit_raises_payload_too_large(client: Client) -> None:
    series = hourly_series(60_000)  # about 2 MB of JSON against a 1 MB limit
    with pytest.raises(PayloadTooLarge) as caught:
        client.forecast(series, 3)
    assert caught.value.status_code == 413 and caught.value.code == "INVALID_REQUEST"
    assert isinstance(caught.value, InvalidRequest) and caught.value.attempts == 1


def test_bad_series_data_raises_data_validation_error_with_the_index(client: Client) -> None:
    timestamps = [f"2026-01-{day:02d}T00:00:00" for day in (1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13)]
    with pytest.raises(DataValidationError) as uneven:
        client.forecast((timestamps, list(range(12))), 3, frequency="Daily")
    error = uneven.value
    assert error.status_code == 422 and error.code == "DATA_VALIDATION_ERROR" and error.attempts == 1
    assert error.field == "series[0].timestamps" and error.index == 4
    assert error.provided == "2026-01-06T00:00:00" and error.expected == "2026-01-05T00:00:00"

    series = hourly_series(30)
    series.iloc[17] = np.nan  # sent as null: a missing value, which the service forecasts around
    assert len(client.forecast(series, 3).median) == 3

    with pytest.raises(DataValidationError) as short:
        client.forecast(hourly_series(5), 3)
    assert short.value.issue == "insufficient data points"


# -- retries -----------------------------------------------------------------------------------------------


def test_connection_refused_is_retried_then_raised(running: Running, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="forecast_client")
    closed = f"http://127.0.0.1:{free_port()}"
    with Client(closed, running.key, max_retries=2, backoff_base=0.05) as nowhere:
        with pytest.raises(APIConnectionError) as caught:
            nowhere.verify()
    assert caught.value.attempts == 3 and not isinstance(caught.value, APITimeoutError)
    retries = [r for r in caplog.records if r.name == "forecast_client" and r.levelno == logging.DEBUG]
    assert len(retries) == 2
    assert all("ConnectError" in r.getMessage() and caught.value.request_id in r.getMessage() for r in retries)
    assert running.key not in caplog.text


def test_silent_server_times_out_is_retried_then_raised(running: Running, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="forecast_client")
    with socket.socket() as listener:  # accepts connections (the kernel's backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        silent = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with Client(silent, running.key, timeout=0.3, max_retries=1, backoff_base=0.05) as waiting:
            started = time.monotonic()
            with pytest.raises(APITimeoutError) as caught:
                waiting.models()
    assert caught.value.attempts == 2 and time.monotonic() - started >= 0.6
    assert [r.getMessage() for r in caplog.records if "ReadTimeout" in r.getMessage()]


def test_async_client_twin(running: Running, client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="forecast_client")
    series = hourly_series()
    blocking = client.forecast(series, 12, model="forecast-model-2")

    async def calls() -> None:
        async with AsyncClient(running.url, running.key) as async_client:
            verified = await async_client.verify()
            assert verified.permissions == ("read",)
            assert [m.id for m in await async_client.models()][0] == "forecast-model-1"
            results = await asyncio.gather(
                *(async_client.forecast(series, 12, model="forecast-model-2") for _ in range(3))
            )
            for result in results:
                assert result.median == blocking.median and result.timestamps == blocking.timestamps
            assert (results[0].to_pandas() == blocking.to_pandas()).all().all()
            with pytest.raises(DataValidationError) as caught:
                await async_client.forecast(hourly_series(5), 3)
            assert caught.value.issue == "insufficient data points"
            spiky = five_minute_series(400, spike_at=380)
            detected = await async_client.detect_anomalies(spiky)
            assert 380 in detected.anomalies and detected.confidence is None
            looser = await async_client.detect_anomalies(spiky, false_alarms_per_week=10)
            assert looser.threshold < detected.threshold and 380 in looser.anomalies
            last = await async_client.detect_last_anomaly(spiky.iloc[:381])
            assert last.is_anomaly and last.timestamp == detected.timestamps[380]
        async with AsyncClient(running.url, running.admin_key) as admin:
            created = await admin.create_key(["read"], name="async")
            assert (await admin.get_key(created.id)).name == "async"
            assert (await admin.key_usage(created.id)).key_id == created.id
            assert (await admin.revoke_key(created.id)).status == "revoked"
        async with AsyncClient(running.url, running.owner_key) as owner:
            monitor = await owner.create_monitor("async monitor", "Minutes", false_alarms_per_week=0.5)
            assert monitor.false_alarms_per_week == 0.5 and monitor.confidence is None
            stored = await owner.add_points(monitor.id, spiky.iloc[:50])
            assert stored.new_points == 50
            assert (await owner.get_monitor(monitor.id, points=3)).point_count == 50
            assert monitor.id in [m.id for m in (await owner.list_monitors()).monitors]
            await owner.delete_monitor(monitor.id)
        closed = f"http://127.0.0.1:{free_port()}"
        async with AsyncClient(closed, running.key, max_retries=1, backoff_base=0.05) as nowhere:
            with pytest.raises(APIConnectionError) as refused:
                await nowhere.verify()
            assert refused.value.attempts == 2

    asyncio.run(calls())
    assert any("ConnectError" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("style", ["naive", "berlin-dst", "space-separated"])
def test_example_script_writes_the_forecast_csv_and_a_chart(
    running: Running, client: Client, tmp_path: Path, style: str
) -> None:
    if style == "berlin-dst":  # offsets change from +01:00 to +02:00 inside the file
        series = hourly_series(200, start="2026-03-22", tz="Europe/Berlin")
        written_times = [t.isoformat() for t in series.index]
    elif style == "space-separated":  # not the service's form: parsed by pandas, sent in the service's form
        series = hourly_series(200)
        written_times = [t.strftime("%Y-%m-%d %H:%M") for t in series.index]
    else:
        series = hourly_series(200)
        written_times = [t.isoformat() for t in series.index]
    source = tmp_path / "history.csv"
    pd.DataFrame({"time": written_times, "load": series.to_numpy()}).to_csv(source, index=False)
    output, chart = tmp_path / "forecast.csv", tmp_path / "forecast.png"
    finished = subprocess.run(
        [sys.executable, str(EXAMPLE), str(source), "--horizon", "12", "--output", str(output), "--chart",
         str(chart), "--model", "forecast-model-2"],
        env={**running.env, "FORECAST_URL": running.url, "FORECAST_API_KEY": running.key, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )
    assert finished.returncode == 0, finished.stderr
    written = pd.read_csv(output)
    direct = client.forecast(series, 12, model="forecast-model-2")
    assert written["timestamp"].tolist() == direct.timestamps
    if style == "berlin-dst":
        assert direct.timestamps[0].endswith("+02:00")
    assert np.allclose(written["median"], direct.median) and np.allclose(written["upper"], direct.upper)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not chart.exists() and "matplotlib is not installed" in finished.stderr
    else:
        assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 5000
    assert running.key not in finished.stdout + finished.stderr


def test_example_script_reports_a_service_error(running: Running, tmp_path: Path) -> None:
    source = tmp_path / "short.csv"
    source.write_text("time,value\n" + "".join(f"2026-01-0{d}T00:00:00,{d}\n" for d in range(1, 6)))
    finished = subprocess.run(
        [sys.executable, str(EXAMPLE), str(source), "--horizon", "3", "--output", str(tmp_path / "out.csv")],
        env={**running.env, "FORECAST_URL": running.url, "FORECAST_API_KEY": running.key},
        capture_output=True, text=True, timeout=120,
    )
    assert finished.returncode == 1
    assert "422 DATA_VALIDATION_ERROR" in finished.stderr and not (tmp_path / "out.csv").exists()


# Last in the module: the limited key's three requests were spent when the server started.
def test_rate_limited_call_waits_out_the_real_retry_after(running: Running, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="forecast_client")
    series = hourly_series(50)
    # Normally spent already; if the earlier tests outlasted the minute, spend the window again now.
    for _ in range(4):
        status = httpx.post(running.url + "/forecast", json={}, timeout=10,
                            headers={"Authorization": f"Bearer {running.limited_key}"}).status_code
        if status == 429:
            break
    assert status == 429
    with Client(running.url, running.limited_key, max_retries=1, retry_budget=0.5) as impatient:
        with pytest.raises(RateLimited) as caught:
            impatient.forecast(series, 3, model="forecast-model-2")
    error = caught.value
    assert error.status_code == 429 and error.code == "RATE_LIMIT_EXCEEDED"
    assert error.attempts == 1  # the Retry-After is longer than the budget: raised at once
    assert error.limit == 3 and error.window == "minute"
    assert error.retry_after is not None and 1 <= error.retry_after <= 61
    assert error.reset_time is not None and abs(error.reset_time.timestamp() - time.time() - error.retry_after) <= 2
    assert error.rate_limit is not None and error.rate_limit.remaining == 0

    with Client(running.url, running.limited_key, max_retries=2, retry_budget=90) as patient:
        started = time.monotonic()
        result = patient.forecast(series, 3, model="forecast-model-2")
    waited = time.monotonic() - started
    assert len(result) == 3
    retries = [r for r in caplog.records if r.name == "forecast_client" and "status 429" in r.getMessage()]
    assert len(retries) == 1
    record = retries[0]
    assert "Retry-After" in record.getMessage() and record.request_id == result.request_id
    assert waited >= record.delay >= 1
    assert running.limited_key not in caplog.text
    assert forecast_client.__version__ == "0.1.0"
