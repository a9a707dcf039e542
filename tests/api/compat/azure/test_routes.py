"""The Azure Anomaly Detector v1.1 compatible routes: Azure's fields, limits, error codes, key header."""

from __future__ import annotations

import io
import json
import math
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import ROOMY_LIMITS, bearer, new_key, services_of, serving_app

BASE = "/anomalydetector/v1.1/timeseries"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with serving_app(tmp_path_factory, "azure", forecast_workers=1) as app:
        yield app


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, permissions=("read",), **ROOMY_LIMITS)[0]


def subscription(key: str) -> dict[str, str]:
    return {"Ocp-Apim-Subscription-Key": key}


def five_minute(points: int, *, spike_at: int | None = None, step_at: int | None = None) -> dict[str, Any]:
    start = datetime(2026, 3, 1)
    series = []
    for i in range(points):
        value = 100 + 20 * math.sin(2 * math.pi * i / 288) + (i * 7919 % 13) / 13
        if spike_at is not None and i == spike_at:
            value += 40
        if step_at is not None and i >= step_at:
            value += 30
        stamp = (start + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        series.append({"timestamp": stamp, "value": value})
    return {"series": series, "granularity": "minutely", "customInterval": 5}


def test_entire_detect_answers_in_azures_shape(client: FlaskClient, key: str) -> None:
    response = client.post(f"{BASE}/entire/detect", headers=subscription(key), json=five_minute(900, spike_at=850))
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {
        "period", "expectedValues", "upperMargins", "lowerMargins", "isAnomaly", "isNegativeAnomaly",
        "isPositiveAnomaly", "severity",
    }  # fmt: skip
    assert body["period"] == 288
    for name in body:
        if name != "period":
            assert len(body[name]) == 900
    assert body["isAnomaly"][850] and body["isPositiveAnomaly"][850] and not body["isNegativeAnomaly"][850]
    assert 0.5 <= body["severity"][850] <= 1
    for flag, severity, up, down in zip(
        body["isAnomaly"], body["severity"], body["upperMargins"], body["lowerMargins"], strict=True
    ):
        assert up >= 0 and down >= 0 and (severity == 0) == (not flag)


def test_last_detect_matches_the_last_point_of_entire(client: FlaskClient, key: str) -> None:
    request = five_minute(700, spike_at=699)
    entire = client.post(f"{BASE}/entire/detect", headers=subscription(key), json=request).get_json()
    response = client.post(f"{BASE}/last/detect", headers=subscription(key), json=request)
    assert response.status_code == 200, response.get_data(as_text=True)
    last = response.get_json()
    assert last["isAnomaly"] and last["isPositiveAnomaly"] and last["severity"] > 0
    assert last["expectedValue"] == entire["expectedValues"][-1]
    assert last["upperMargin"] == entire["upperMargins"][-1]
    assert last["period"] == 288 and 0 < last["suggestedWindow"] <= 700


def test_max_anomaly_ratio_keeps_the_strongest(client: FlaskClient, key: str) -> None:
    request = five_minute(1500)
    spikes = {1100: 50, 1160: 90, 1220: 70, 1280: 110, 1340: 60}
    for i, height in spikes.items():
        request["series"][i]["value"] += height
    free = client.post(f"{BASE}/entire/detect", headers=subscription(key), json=request).get_json()
    assert all(free["isAnomaly"][i] for i in spikes)
    capped = client.post(
        f"{BASE}/entire/detect", headers=subscription(key), json={**request, "maxAnomalyRatio": 0.0015}
    )
    flagged = [i for i, flag in enumerate(capped.get_json()["isAnomaly"]) if flag]
    assert flagged == [1160, 1280]  # 0.0015 * 1500 = 2 points: the two largest surprises


def test_granularity_none_needs_no_timestamps_and_period_is_honoured(client: FlaskClient, key: str) -> None:
    series = [{"value": 10 + (i % 7) + (50 if i == 60 else 0)} for i in range(80)]
    body = client.post(f"{BASE}/entire/detect", headers=subscription(key), json={"series": series, "period": 7})
    assert body.status_code == 200, body.get_data(as_text=True)
    assert body.get_json()["period"] == 7 and body.get_json()["isAnomaly"][60]


def test_change_point_finds_the_step(client: FlaskClient, key: str) -> None:
    rng = random.Random(4)
    series = [
        {"timestamp": f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z", "value": rng.gauss(0, 1) + (8 if i >= 400 else 0)}
        for i in range(600)
    ]
    request = {"series": series, "granularity": "minutely"}
    response = client.post(f"{BASE}/changepoint/detect", headers=subscription(key), json=request)
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"period", "isChangePoint", "confidenceScores"}
    found = [i for i, flag in enumerate(body["isChangePoint"]) if flag]
    assert found and all(abs(i - 400) <= 3 for i in found)
    assert all(0 <= c <= 1 for c in body["confidenceScores"])


def test_bearer_works_too(client: FlaskClient, key: str) -> None:
    assert client.post(f"{BASE}/last/detect", headers=bearer(key), json=five_minute(30)).status_code == 200


def _error(response: Any) -> tuple[int, str]:
    body = response.get_json()
    assert set(body) == {"code", "message"}, body
    assert response.headers["x-ms-error-code"] == body["code"]
    return response.status_code, body["code"]


def test_key_and_permission_errors_are_azure_shaped(app: Flask, client: FlaskClient) -> None:
    assert _error(client.post(f"{BASE}/entire/detect", json=five_minute(30))) == (401, "Unauthorized")
    wrong = {"Ocp-Apim-Subscription-Key": "ak_" + "0" * 64}
    assert _error(client.post(f"{BASE}/entire/detect", headers=wrong, json=five_minute(30))) == (401, "Unauthorized")
    writer, _ = new_key(app, permissions=("write",))
    response = client.post(f"{BASE}/last/detect", headers=subscription(writer), json=five_minute(30))
    assert _error(response) == (403, "Forbidden")


def test_rate_limit_is_azure_shaped(app: Flask, client: FlaskClient) -> None:
    limited, _ = new_key(app, permissions=("read",), per_minute=1)
    assert client.post(f"{BASE}/last/detect", headers=subscription(limited), json=five_minute(30)).status_code == 200
    response = client.post(f"{BASE}/last/detect", headers=subscription(limited), json=five_minute(30))
    assert _error(response) == (429, "TooManyRequests")
    assert int(response.headers["Retry-After"]) >= 1


def _with(**change: Any) -> dict[str, Any]:
    return {**five_minute(30), **change}


def _unsorted() -> dict[str, Any]:
    request = five_minute(30)
    request["series"][5], request["series"][6] = request["series"][6], request["series"][5]
    return request


def _duplicated() -> dict[str, Any]:
    request = five_minute(30)
    request["series"][6]["timestamp"] = request["series"][5]["timestamp"]
    return request


def _value(value: Any) -> dict[str, Any]:
    request = five_minute(30)
    request["series"][9]["value"] = value
    return request


def _no_value() -> dict[str, Any]:
    request = five_minute(30)
    del request["series"][3]["value"]
    return request


@pytest.mark.parametrize(
    ("route", "body", "code"),
    [
        ("entire", {"granularity": "daily"}, "RequiredSeries"),
        ("entire", five_minute(11), "InvalidSeries"),
        ("entire", five_minute(8641), "InvalidSeries"),
        ("last", _unsorted(), "InvalidSeries"),
        ("last", _duplicated(), "InvalidSeries"),
        ("entire", _no_value(), "InvalidSeries"),
        ("entire", _value(True), "InvalidSeries"),
        ("entire", _value(None), "InvalidSeries"),
        ("last", _value(1e301), "InvalidSeries"),
        ("entire", _with(series=[7] * 30), "InvalidSeries"),
        ("entire", _with(series="nope"), "InvalidSeries"),
        ("entire", _with(granularity="fortnightly"), "InvalidGranularity"),
        ("entire", _with(customInterval=0), "InvalidCustomInterval"),
        ("entire", _with(period=-1), "InvalidPeriod"),
        ("last", _with(sensitivity=100), "BadArgument"),
        ("last", _with(sensitivity=9.5), "BadArgument"),
        ("entire", _with(maxAnomalyRatio=0.5), "BadArgument"),
        ("entire", _with(imputeMode="guess"), "InvalidImputeMode"),
        ("entire", _with(imputeMode="fixed", imputeFixedValue="x"), "InvalidImputeFixedValue"),
        ("changepoint", {"series": five_minute(30)["series"]}, "RequiredGranularity"),
        ("changepoint", _with(stableTrendWindow=2), "BadArgument"),
        ("changepoint", _with(stableTrendWindow=15), "BadArgument"),
        ("changepoint", _with(threshold=1.5), "BadArgument"),
        ("entire", [1, 2, 3], "InvalidJsonFormat"),
    ],
)
def test_bad_requests_answer_azures_codes(client: FlaskClient, key: str, route: str, body: Any, code: str) -> None:
    response = client.post(f"{BASE}/{route}/detect", headers=subscription(key), json=body)
    assert _error(response) == (400, code)


def test_a_chunked_body_over_the_limit_is_413_not_a_json_error(app: Flask, client: FlaskClient, key: str) -> None:
    # No length declared, so the body is read up to the limit before it is known to be too large.
    over = services_of(app).settings.max_body_bytes + 1
    response = client.post(f"{BASE}/entire/detect", input_stream=io.BytesIO(b" " * over),
                           headers={**subscription(key), "Content-Type": "application/json",
                                    "Transfer-Encoding": "chunked"})
    assert _error(response) == (413, "BadArgument")


def test_broken_json_and_bad_timestamp(client: FlaskClient, key: str) -> None:
    headers = {**subscription(key), "Content-Type": "application/json"}
    assert _error(client.post(f"{BASE}/entire/detect", headers=headers, data=b"{")) == (400, "InvalidJsonFormat")
    nan = json.dumps(five_minute(30)).replace('"value": 100.0', '"value": NaN', 1).encode()
    assert b"NaN" in nan
    assert _error(client.post(f"{BASE}/last/detect", headers=headers, data=nan)) == (400, "InvalidSeries")
    request = five_minute(30)
    request["series"][7]["timestamp"] = "soon"
    assert _error(client.post(f"{BASE}/entire/detect", headers=subscription(key), json=request)) == (
        400,
        "InvalidSeries",
    )


def test_house_routes_keep_the_house_envelope(client: FlaskClient) -> None:
    assert client.post("/anomalies", json={}).get_json()["error"]["code"] == "UNAUTHORIZED"


def test_openapi_documents_both_apis_and_answers_match_their_schemas(client: FlaskClient, key: str) -> None:
    from openapi_spec_validator import validate

    from app.anomalies.schemas import AnomalyResponseSchema, LastPointResponseSchema
    from app.compat.azure.schemas import (
        AzureErrorSchema,
        ChangePointResponseSchema,
        EntireDetectResponseSchema,
        LastDetectResponseSchema,
    )

    spec = client.get("/openapi.json", headers=bearer(key)).get_json()
    validate(spec)
    for path in ("/anomalies", "/anomalies/last", *(f"{BASE}/{r}/detect" for r in ("entire", "last", "changepoint"))):
        assert "post" in spec["paths"][path], path
    assert spec["components"]["securitySchemes"]["subscriptionKey"]["name"] == "Ocp-Apim-Subscription-Key"

    request = five_minute(40)
    ours = {
        "series": [
            {
                "timestamps": [p["timestamp"] for p in request["series"]],
                "values": [p["value"] for p in request["series"]],
            }
        ],
        "data_frequency": "Minutes",
    }
    checks = (
        ("/anomalies", ours, AnomalyResponseSchema),
        ("/anomalies/last", ours, LastPointResponseSchema),
        (f"{BASE}/entire/detect", request, EntireDetectResponseSchema),
        (f"{BASE}/last/detect", request, LastDetectResponseSchema),
        (f"{BASE}/changepoint/detect", request, ChangePointResponseSchema),
        (f"{BASE}/entire/detect", {"series": []}, AzureErrorSchema),
    )
    for path, body, schema in checks:
        answer = client.post(path, headers=subscription(key) if BASE in path else bearer(key), json=body).get_json()
        assert schema().validate(answer) == {}, (path, answer)
