"""POST /anomalies and /anomalies/last answered by the real detector in real worker processes."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import ROOMY_LIMITS, bearer, build_app, new_key, services_of, serving_app, settings_for

FIELDS = ("expected", "lower_bound", "upper_bound", "anomaly_score", "is_anomaly", "direction")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with serving_app(tmp_path_factory, "anomalies", forecast_workers=1, max_points=5000) as app:
        yield app


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, permissions=("read",), **ROOMY_LIMITS)[0]


def five_minute(points: int, *, spike_at: int | None = None, gaps: bool = False) -> dict[str, Any]:
    start = datetime(2026, 3, 1)
    stamps, values, t = [], [], start
    for i in range(points):
        stamps.append(t.strftime("%Y-%m-%dT%H:%M:%S"))
        values.append(100 + 20 * math.sin(2 * math.pi * i / 288) + (i * 7919 % 13) / 13)
        # Holes and jitter, as road sensors deliver them.
        t += timedelta(minutes=10 if gaps and i % 17 == 0 else 5, seconds=(i % 3) * 7 if gaps else 0)
    if spike_at is not None:
        values[spike_at] += 40
    return {"series": [{"timestamps": stamps, "values": values}], "data_frequency": "Minutes"}


def test_every_row_gets_a_verdict_and_the_spike_is_found(client: FlaskClient, key: str) -> None:
    response = client.post("/anomalies", headers=bearer(key), json=five_minute(1000, spike_at=800))
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert list(body) == ["timestamps", *FIELDS[:5], "threshold", FIELDS[5], "reason", "warmup_points", "period",
                          "out_of_order"]
    # Every flagged row says why, and no other row does: here the spike's own value, beyond its range.
    assert [row for row, why in enumerate(body["reason"]) if why] == [r for r, f in enumerate(body["is_anomaly"]) if f]
    assert "far above its expected range" in body["reason"][800]
    assert body["timestamps"] == five_minute(1000)["series"][0]["timestamps"]
    for name in FIELDS:
        assert len(body[name]) == 1000
    for low, mid, high, score, flag, direction in zip(
        body["lower_bound"],
        body["expected"],
        body["upper_bound"],
        body["anomaly_score"],
        body["is_anomaly"],
        body["direction"],
        strict=True,
    ):
        assert low <= mid <= high and 0 <= score <= 1 and flag == (score >= body["threshold"])
        assert direction in ((None,) if not flag else ("up", "down"))
    assert body["is_anomaly"][800] and body["direction"][800] == "up"
    assert body["warmup_points"] == 11 and body["anomaly_score"][:11] == [0] * 11
    assert body["period"] == 288
    assert response.headers["X-Model-Id"] == "anomaly-model-1"
    assert "X-Anomaly-Fallback" not in response.headers


def test_gaps_and_jitter_are_accepted(client: FlaskClient, key: str) -> None:
    response = client.post("/anomalies", headers=bearer(key), json=five_minute(600, gaps=True))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert len(response.get_json()["anomaly_score"]) == 600


def test_last_equals_the_last_row_of_the_whole_series(client: FlaskClient, key: str) -> None:
    request = five_minute(900, spike_at=899, gaps=True)
    whole = client.post("/anomalies", headers=bearer(key), json=request).get_json()
    last = client.post("/anomalies/last", headers=bearer(key), json=request)
    assert last.status_code == 200, last.get_data(as_text=True)
    body = last.get_json()
    assert list(body) == ["timestamp", *FIELDS[:5], "threshold", FIELDS[5], "reason", "warmup_points", "period",
                          "out_of_order"]
    assert body["reason"] == whole["reason"][-1] and "above its expected range" in body["reason"]
    assert body["threshold"] == whole["threshold"]
    assert body["timestamp"] == whole["timestamps"][-1]
    for name in FIELDS:
        assert body[name] == whole[name][-1], name
    assert body["is_anomaly"] and body["direction"] == "up"


def test_verdicts_do_not_look_ahead(client: FlaskClient, key: str) -> None:
    whole = client.post("/anomalies", headers=bearer(key), json=five_minute(700)).get_json()
    request = five_minute(700)
    request["series"][0] = {name: values[:400] for name, values in request["series"][0].items()}
    prefix = client.post("/anomalies", headers=bearer(key), json=request).get_json()
    for name in FIELDS:
        assert prefix[name] == whole[name][:400]


def test_the_fallback_detector_can_be_chosen(client: FlaskClient, key: str) -> None:
    response = client.post(
        "/anomalies", headers={**bearer(key), "X-Model-Id": "anomaly-model-2"}, json=five_minute(300, spike_at=250)
    )
    assert response.status_code == 200
    assert response.headers["X-Model-Id"] == "anomaly-model-2"
    assert response.get_json()["is_anomaly"][250]


def _post(client: FlaskClient, key: str, body: Any, path: str = "/anomalies", **headers: str) -> Any:
    return client.post(path, headers={**bearer(key), **headers}, json=body)


@pytest.mark.parametrize("path", ["/anomalies", "/anomalies/last"])
def test_series_defects_answer_422_with_the_index(client: FlaskClient, key: str, path: str) -> None:
    short = five_minute(11)
    response = _post(client, key, short, path)
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "DATA_VALIDATION_ERROR" and error["details"]["issue"] == "insufficient data points"
    assert error["details"]["minimum"] == 12

    mixed = five_minute(30)
    mixed["series"][0]["timestamps"] = [t + "Z" for t in mixed["series"][0]["timestamps"]]
    mixed["series"][0]["timestamps"][9] = mixed["series"][0]["timestamps"][9][:-1]
    details = _post(client, key, mixed, path).get_json()["error"]["details"]
    assert details["index"] == 9 and details["issue"].startswith("mixed timestamp forms")

    garbled = five_minute(30)
    garbled["series"][0]["timestamps"][4] = "yesterday"
    details = _post(client, key, garbled, path).get_json()["error"]["details"]
    assert (details["index"], details["issue"]) == (4, "invalid timestamp format")

    holes = five_minute(30)
    holes["series"][0]["values"][21] = "21"
    details = _post(client, key, holes, path).get_json()["error"]["details"]
    assert (details["field"], details["index"], details["issue"]) == ("series[0].values", 21, "value must be a number")

    uneven = five_minute(30)
    uneven["series"][0]["values"].pop()
    assert _post(client, key, uneven, path).get_json()["error"]["details"]["issue"] == "arrays must have equal length"


def test_too_many_points_is_422(client: FlaskClient, key: str) -> None:
    response = _post(client, key, five_minute(5001))
    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["maximum"] == 5000


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"confidence": 0.3}, "confidence"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": "0.9"}, "confidence"),
        ({"data_frequency": "Fortnightly"}, "data_frequency"),
        ({"data_frequency": None}, "data_frequency"),
        ({"series": []}, "series"),
    ],
)
def test_request_shape_answers_400(client: FlaskClient, key: str, change: dict[str, Any], field: str) -> None:
    body = {**five_minute(50), **change}
    response = _post(client, key, body)
    assert response.status_code == 400, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == "INVALID_REQUEST" and error["details"]["field"] == field


def test_unknown_detector_missing_field_bad_json_and_media_type(client: FlaskClient, key: str) -> None:
    response = _post(client, key, five_minute(50), **{"X-Model-Id": "anomaly-model-9"})
    assert response.status_code == 400 and response.get_json()["error"]["details"]["field"] == "X-Model-Id"
    missing = five_minute(50)
    del missing["data_frequency"]
    details = _post(client, key, missing).get_json()["error"]["details"]
    assert details["field"] == "data_frequency" and details["issue"] == "Required field is missing"
    broken = client.post("/anomalies", headers={**bearer(key), "Content-Type": "application/json"}, data=b"{")
    assert broken.status_code == 400 and broken.get_json()["error"]["details"]["field"] == "body"
    text = client.post("/anomalies", headers={**bearer(key), "Content-Type": "text/plain"}, data=b"{}")
    assert text.status_code == 415


def test_a_key_is_needed_and_read_permission(app: Flask, client: FlaskClient) -> None:
    assert client.post("/anomalies", json=five_minute(50)).status_code == 401
    writer, _ = new_key(app, permissions=("write",))
    assert client.post("/anomalies/last", headers=bearer(writer), json=five_minute(50)).status_code == 403


def test_timestamp_forms_fast_and_slow_paths_agree() -> None:
    from app.series.instants import epoch_seconds

    zulu = ["2026-03-29T00:30:00Z", "2026-03-29T01:30:00.5Z", "2026-03-29T02:30:00Z"]
    # Crossing a DST change: the offset changes, the instants stay one hour apart.
    shifting = ["2026-03-29T01:30:00+01:00", "2026-03-29T03:30:00.5+02:00", "2026-03-29T04:30:00+02:00"]
    fixed = ["2026-03-29T01:30:00+01:00", "2026-03-29T02:30:00.5+01:00", "2026-03-29T03:30:00+01:00"]
    naive = ["2026-03-29T00:30:00", "2026-03-29T01:30:00.5", "2026-03-29T02:30:00"]
    expected = [1774744200.0, 1774747800.5, 1774751400.0]
    for stamps in (zulu, shifting, fixed, naive):
        assert epoch_seconds(stamps).tolist() == expected
    for bad, index in ((["2026-01-01T00:00:00", "0000-01-01T00:00:00"], 1), (["2026-02-29T00:00:00"], 0)):
        with pytest.raises(ValueError) as error:
            epoch_seconds(bad)
        assert error.value.index == index  # type: ignore[attr-defined]


def test_a_detector_past_its_time_is_a_500_with_the_request_id(tmp_path: Any) -> None:
    app = build_app(
        settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}", forecast_timeout_seconds=0.001), start_workers=True
    )
    try:
        key, _ = new_key(app, permissions=("read",))
        client = app.test_client()
        response = client.post("/anomalies", headers=bearer(key), json=five_minute(3000))
        assert response.status_code == 500
        error = response.get_json()["error"]
        assert error["code"] == "INTERNAL_ERROR" and error["details"]["request_id"]
        assert "Traceback" not in response.get_data(as_text=True)
        azure = client.post(
            "/anomalydetector/v1.1/timeseries/entire/detect",
            headers={"Ocp-Apim-Subscription-Key": key},
            json={"series": [{"value": float(i % 5)} for i in range(3000)]},
        )
        assert azure.status_code == 500
        body = azure.get_json()
        assert body["code"] == "InternalServerError" and azure.headers["X-Request-Id"] in body["message"]
    finally:
        services_of(app).close()


@pytest.mark.parametrize("path", ["/anomalies", "/anomalies/last"])
def test_repeated_and_backward_timestamps_are_judged_in_the_order_given(
    client: FlaskClient, key: str, path: str
) -> None:
    body = five_minute(300)
    stamps = body["series"][0]["timestamps"]
    stamps[120] = stamps[119]  # an hour of local time written twice
    stamps[200:] = stamps[189:289]  # a clock stepping back 55 minutes
    response = _post(client, key, body, path)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    assert answer["out_of_order"] == [120, 200]
    if path == "/anomalies":
        assert len(answer["anomaly_score"]) == 300 and answer["timestamps"] == stamps


def test_the_alarm_budget_sets_the_threshold_and_one_field_sets_it(client: FlaskClient, key: str) -> None:
    body = five_minute(300)
    default = _post(client, key, body).get_json()
    one = _post(client, key, {**body, "false_alarms_per_week": 1}).get_json()
    assert one == default  # one false alarm a week is the default
    # Five-minute rows: a week is 2,016 of them, so one alarm a week is a threshold of 1 - 1/2016.
    assert default["threshold"] == pytest.approx(1 - 1 / 2016)
    lenient = _post(client, key, {**body, "false_alarms_per_week": 10}).get_json()
    strict = _post(client, key, {**body, "sensitivity": 0}).get_json()
    assert lenient["threshold"] == pytest.approx(1 - 10 / 2016)
    assert strict["threshold"] == pytest.approx(1 - 0.01 / 2016)  # sensitivity 0: one in a hundred weeks
    widths = [statistics.median(u - e for u, e in zip(answer["upper_bound"][20:], answer["expected"][20:],
                                                       strict=True)) for answer in (strict, default, lenient)]
    assert widths[0] > widths[1] > widths[2]  # a smaller budget, a wider range
    assert _post(client, key, {**body, "confidence": 0.999}).get_json()["threshold"] == pytest.approx(0.999)
    for extra in ({"sensitivity": 50, "confidence": 0.9}, {"false_alarms_per_week": 2, "sensitivity": 50},
                  {"false_alarms_per_week": 2, "confidence": 0.9}):
        both = _post(client, key, {**body, **extra})
        assert both.status_code == 400
        assert both.get_json()["error"]["details"]["field"] in extra
    for bad in ({"sensitivity": 100}, {"false_alarms_per_week": 0}, {"false_alarms_per_week": "1"},
                {"false_alarms_per_week": 1e9}):
        assert _post(client, key, {**body, **bad}).status_code == 400
