"""Every row of the error table for POST /forecast, in its check order (docs/contract.md, section 6), through HTTP.

These requests are all refused before a model runs, so the app here has no forecast workers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, build_app, new_key, services_of, settings_for


@pytest.fixture(scope="module")
def app(module_app: Flask) -> Flask:
    """One app for the module: every test makes its own keys, so their counters never meet."""
    return module_app


def valid_body(points: int = 24, frequency: str = "Hours") -> dict[str, Any]:
    return {
        "series": [
            {
                "timestamps": [f"2026-01-{1 + i // 24:02d}T{i % 24:02d}:00:00" for i in range(points)],
                "values": [float(10 + i % 5) for i in range(points)],
            }
        ],
        "forecast_horizon": 5,
        "data_frequency": frequency,
        "forecast_frequency": frequency,
    }


@pytest.fixture
def key(app: Flask) -> str:
    return new_key(app)[0]


def post(client: FlaskClient, key: str, body: Any, headers: dict[str, str] | None = None):  # noqa: ANN201
    return client.post("/forecast", headers={**bearer(key), **(headers or {})}, json=body)


def error_of(response, status: int, code: str) -> dict[str, Any]:  # noqa: ANN001
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    return error


def with_changes(**changes: Any) -> dict[str, Any]:
    body = valid_body()
    body.update(changes)
    return body


def with_series(**changes: Any) -> dict[str, Any]:
    body = valid_body()
    body["series"][0].update(changes)
    return body


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"{", b"[1, 2]", b'"text"', b"null", b"\xff\xfe"],
)
def test_body_not_json_or_not_an_object_is_400(client: FlaskClient, key: str, raw: bytes) -> None:
    response = client.post(
        "/forecast", headers={**bearer(key), "Content-Type": "application/json"}, data=raw
    )
    error_of(response, 400, "INVALID_REQUEST")


@pytest.mark.parametrize("missing", ["series", "forecast_horizon", "data_frequency", "forecast_frequency"])
def test_missing_required_field_is_400(client: FlaskClient, key: str, missing: str) -> None:
    body = valid_body()
    del body[missing]
    error = error_of(post(client, key, body), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == missing
    assert error["details"]["issue"] == "Required field is missing"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("series", {"timestamps": [], "values": []}),
        ("series", "x"),
        ("forecast_horizon", "5"),
        ("forecast_horizon", 5.5),
        ("forecast_horizon", True),
        ("confidence", "0.9"),
        ("confidence", True),
        ("data_frequency", 3),
    ],
)
def test_wrong_json_type_is_400(client: FlaskClient, key: str, field: str, value: Any) -> None:
    error = error_of(post(client, key, with_changes(**{field: value})), 400, "INVALID_REQUEST")
    assert error["details"]["field"].startswith(field)


def test_series_arrays_of_wrong_type_are_400(client: FlaskClient, key: str) -> None:
    error = error_of(post(client, key, with_series(values="1,2,3")), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "series[0].values"
    error = error_of(post(client, key, with_series(timestamps=None)), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "series[0].timestamps"


@pytest.mark.parametrize("count", [0, 2])
def test_series_must_have_exactly_one_element(client: FlaskClient, key: str, count: int) -> None:
    body = valid_body()
    body["series"] = body["series"] * count
    error = error_of(post(client, key, body), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "series"


@pytest.mark.parametrize("horizon", [0, -1, 101, 10**9])
def test_horizon_out_of_range_is_400_with_the_spec_text(client: FlaskClient, key: str, horizon: int) -> None:
    error = error_of(post(client, key, with_changes(forecast_horizon=horizon)), 400, "INVALID_REQUEST")
    assert error["details"] == {"field": "forecast_horizon", "issue": "Must be between 1 and 100", "provided": horizon}


def test_unknown_frequency_lists_the_choices(client: FlaskClient, key: str) -> None:
    error = error_of(post(client, key, with_changes(data_frequency="Fortnightly")), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "data_frequency"
    for name in ("Seconds", "Minutes", "Hours", "Daily", "Weekly", "Monthly", "Quarterly", "Yearly"):
        assert name in error["details"]["issue"]


def test_forecast_frequency_must_equal_data_frequency(client: FlaskClient, key: str) -> None:
    error = error_of(post(client, key, with_changes(forecast_frequency="Daily")), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "forecast_frequency"
    assert error["details"]["provided"] == "Daily"


@pytest.mark.parametrize("confidence", [0.09, 0.995, 1, 0, -0.5, 95])
def test_confidence_out_of_range_is_400(client: FlaskClient, key: str, confidence: float) -> None:
    error = error_of(post(client, key, with_changes(confidence=confidence)), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "confidence"


def test_nan_confidence_is_400(client: FlaskClient, key: str) -> None:
    raw = json.dumps(valid_body())[:-1] + ', "confidence": NaN}'
    response = client.post("/forecast", headers={**bearer(key), "Content-Type": "application/json"}, data=raw)
    assert error_of(response, 400, "INVALID_REQUEST")["details"]["field"] == "confidence"


def test_unknown_model_id_is_400(client: FlaskClient, key: str) -> None:
    error = error_of(post(client, key, valid_body(), {"X-Model-Id": "forecast-model-9"}), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "X-Model-Id"
    assert "forecast-model-1" in error["details"]["issue"]


def test_model_selector_alias_conflicting_with_model_id_is_400(client: FlaskClient, key: str) -> None:
    headers = {"X-Model-Id": "forecast-model-1", "X-Model-Selector": "forecast-model-2"}
    error = error_of(post(client, key, valid_body(), headers), 400, "INVALID_REQUEST")
    assert error["details"]["field"] == "X-Model-Selector"


def test_several_problems_are_all_listed(client: FlaskClient, key: str) -> None:
    body = with_changes(forecast_horizon=500, confidence=2)
    error = error_of(post(client, key, body, {"X-Model-Id": "nope"}), 400, "INVALID_REQUEST")
    fields = [e["field"] for e in error["details"]["errors"]]
    assert set(fields) == {"forecast_horizon", "confidence", "X-Model-Id"}
    assert error["details"]["field"] == fields[0]


def test_unknown_extra_fields_are_ignored(client: FlaskClient, key: str) -> None:
    # Shape passes, so the refusal comes from the data stage: extra fields did not cause a 400.
    body = with_changes(extra="x", forecast_horizon=5)
    body["series"][0]["unit"] = "ms"
    body["series"][0]["values"] = body["series"][0]["values"][:-1]
    error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")


def test_non_json_content_type_is_415(client: FlaskClient, key: str) -> None:
    response = client.post(
        "/forecast", headers={**bearer(key), "Content-Type": "text/plain"}, data=json.dumps(valid_body())
    )
    error_of(response, 415, "INVALID_REQUEST")


def test_json_suffix_content_type_is_accepted(client: FlaskClient, key: str) -> None:
    body = with_series(values=[1] * 23)  # reaches the data stage: the content type was accepted
    response = client.post(
        "/forecast",
        headers={**bearer(key), "Content-Type": "application/vnd.api+json; charset=utf-8"},
        data=json.dumps(body),
    )
    error = error_of(response, 422, "DATA_VALIDATION_ERROR")
    # The series-data stage judged the body, so the media type and the shape were both accepted.
    assert error["details"]["field"].startswith("series[0]"), error


def test_body_over_the_limit_is_413(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", max_body_bytes=2048))
    key = new_key(app)[0]
    raw = json.dumps(valid_body(200))
    assert len(raw) > 2048
    response = app.test_client().post(
        "/forecast", headers={**bearer(key), "Content-Type": "application/json"}, data=raw
    )
    error_of(response, 413, "INVALID_REQUEST")
    services_of(app).close()


def test_unequal_lengths_is_422(client: FlaskClient, key: str) -> None:
    error = error_of(post(client, key, with_series(values=[1.0] * 23)), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["issue"] == "arrays must have equal length"


def test_fewer_than_ten_points_is_422(client: FlaskClient, key: str) -> None:
    body = valid_body(9)
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["issue"] == "insufficient data points"
    assert error["details"]["minimum"] == 10


def test_more_than_the_maximum_points_is_422(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", max_points=50))
    key = new_key(app)[0]
    error = error_of(post(app.test_client(), key, valid_body(51)), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["maximum"] == 50
    services_of(app).close()


@pytest.mark.parametrize(
    ("bad", "issue"),
    [
        ("12", "value must be a number"),
        (True, "value must be a number"),
        ([1], "value must be a number"),
    ],
)
def test_bad_values_are_422_with_index(client: FlaskClient, key: str, bad: Any, issue: str) -> None:
    body = valid_body()
    body["series"][0]["values"][7] = bad
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["field"] == "series[0].values"
    assert error["details"]["issue"] == issue
    assert error["details"]["index"] == 7


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_values_are_422_with_index(client: FlaskClient, key: str, literal: str) -> None:
    body = valid_body()
    body["series"][0]["values"][3] = "__X__"
    raw = json.dumps(body).replace('"__X__"', literal)
    response = client.post("/forecast", headers={**bearer(key), "Content-Type": "application/json"}, data=raw)
    error = error_of(response, 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["index"] == 3


def test_bad_timestamp_is_422_with_index(client: FlaskClient, key: str) -> None:
    body = valid_body()
    body["series"][0]["timestamps"][4] = "2026-01-01t04:00:00"
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["issue"] == "invalid timestamp format"
    assert error["details"]["index"] == 4


def test_non_string_timestamp_is_422(client: FlaskClient, key: str) -> None:
    body = valid_body()
    body["series"][0]["timestamps"][2] = 1700000000
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["index"] == 2


def test_timestamps_not_increasing_is_422(client: FlaskClient, key: str) -> None:
    body = valid_body()
    stamps = body["series"][0]["timestamps"]
    stamps[5], stamps[6] = stamps[6], stamps[5]
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["index"] in (6, 5)


def test_uneven_spacing_names_index_and_expected(client: FlaskClient, key: str) -> None:
    body = valid_body()
    body["series"][0]["timestamps"][10] = "2026-01-01T10:30:00"
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert error["details"]["index"] == 10
    assert error["details"]["expected"] == "2026-01-01T10:00:00"


def test_all_data_defects_are_listed(client: FlaskClient, key: str) -> None:
    body = valid_body()
    body["series"][0]["values"][2] = "12"
    body["series"][0]["timestamps"][4] = "garbage"
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert {e["field"] for e in error["details"]["errors"]} == {"series[0].values", "series[0].timestamps"}


def test_provided_is_an_excerpt_never_the_whole_array(client: FlaskClient, key: str) -> None:
    body = valid_body(5000)
    body["series"][0]["values"] = body["series"][0]["values"][:-1]
    error = error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert len(json.dumps(error)) < 1000


def test_check_order_shape_before_data(client: FlaskClient, key: str) -> None:
    body = with_series(values=[None] * 24)
    body["forecast_horizon"] = 0
    error_of(post(client, key, body), 400, "INVALID_REQUEST")


def test_check_order_auth_before_shape(client: FlaskClient) -> None:
    error_of(client.post("/forecast", data="garbage"), 401, "UNAUTHORIZED")


def test_refused_requests_change_nothing_but_counters(app: Flask, client: FlaskClient, key: str) -> None:
    # Refused at the last stage before a model would run; a valid body would start forecast workers.
    body = valid_body()
    body["series"][0]["values"][3] = "12"
    before = copy.deepcopy(body)
    error_of(post(client, key, body), 422, "DATA_VALIDATION_ERROR")
    assert body == before
    assert client.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"] == "49"


def test_messages_built_around_a_validation_message_end_in_one_full_stop(client: FlaskClient, key: str) -> None:
    body = valid_body()
    body["forecast_horizon"] = "twelve"
    response = client.post("/forecast", headers=bearer(key), json=body)
    assert response.status_code == 400
    message = response.get_json()["error"]["message"]
    assert message.endswith(".") and not message.endswith("..")
