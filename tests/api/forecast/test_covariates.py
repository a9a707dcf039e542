"""POST /forecast with covariates, holidays and calendar features (docs/covariates.md), answered by the real models
in real worker processes; every bad input a 4xx naming its field, the model never reached."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import ROOMY_LIMITS, bearer, new_key, serving_app

HORIZON = 14
POINTS = 210


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with serving_app(tmp_path_factory, "covariates", forecast_workers=1) as app:
        yield app


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, permissions=("read",), **ROOMY_LIMITS)[0]


def days(count: int, start: datetime = datetime(2025, 6, 1)) -> list[str]:
    return [(start + timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)]


def promotion_body(seed: int = 7) -> dict[str, Any]:
    """Daily sales that a promotion lifts by 40 over a level of 100 (noise of 2): the promotion drives them."""
    rng = random.Random(seed)
    promo = [float(rng.random() < 0.3) for _ in range(POINTS + HORIZON)]
    values = [100 + 40 * promo[i] + 5 * math.sin(2 * math.pi * i / 7) + rng.gauss(0, 2) for i in range(POINTS)]
    return {
        "series": [{"timestamps": days(POINTS), "values": values,
                    "covariates": [{"name": "promo", "history": promo[:POINTS], "future": promo[POINTS:]}]}],
        "forecast_horizon": HORIZON,
        "data_frequency": "Daily",
        "forecast_frequency": "Daily",
    }


def plain_body() -> dict[str, Any]:
    body = promotion_body()
    del body["series"][0]["covariates"]
    return body


def post(client: FlaskClient, key: str, body: Any) -> Any:
    return client.post("/forecast", headers=bearer(key), json=body)


def refused(response: Any, status: int, field: str, issue_part: str, **extra: Any) -> dict[str, Any]:
    """The envelope of a 4xx naming ``field``: its code, one-sentence message and details, nothing else."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == ("DATA_VALIDATION_ERROR" if status == 422 else "INVALID_REQUEST")
    assert error["message"].endswith(".")
    details = error["details"]
    assert details["field"] == field, details
    assert issue_part in details["issue"], details
    assert "provided" in details
    for name, value in extra.items():
        assert details[name] == value, details
    assert "request_id" not in details
    return details


# --- answers ------------------------------------------------------------------------------------------------------


def test_a_promotion_that_drives_the_series_is_used_and_shows_in_the_forecast(client: FlaskClient, key: str) -> None:
    body = promotion_body()
    response = post(client, key, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    assert list(answer) == ["forecast_timestamps", "lower_bound", "median", "upper_bound", "covariates"]
    assert answer["covariates"] == {"used": True, "names": ["promo"], "note": None, "holidays_in_horizon": []}
    promo = body["series"][0]["covariates"][0]["future"]
    lifted = [m for m, p in zip(answer["median"], promo, strict=True) if p]
    plain = [m for m, p in zip(answer["median"], promo, strict=True) if not p]
    assert lifted and plain
    assert 30 < sum(lifted) / len(lifted) - sum(plain) / len(plain) < 50
    for low, mid, high in zip(answer["lower_bound"], answer["median"], answer["upper_bound"], strict=True):
        assert low <= mid <= high

    without = post(client, key, plain_body()).get_json()
    assert "covariates" not in without
    # Without the promotion the model cannot tell promotion days apart: its forecast is flat across them.
    flat = [m for m, p in zip(without["median"], promo, strict=True) if p]
    assert abs(sum(flat) / len(flat) - sum(lifted) / len(lifted)) > 15


def test_a_body_without_covariates_answers_as_before_and_empty_lists_send_none(client: FlaskClient, key: str) -> None:
    plain = post(client, key, plain_body())
    assert plain.status_code == 200
    assert list(plain.get_json()) == ["forecast_timestamps", "lower_bound", "median", "upper_bound"]
    body = plain_body()
    body["series"][0]["covariates"] = []
    body["calendar_features"] = []
    body["holidays"] = None
    empty = post(client, key, body)
    assert empty.status_code == 200
    assert empty.get_json() == plain.get_json()


def test_noise_covariates_fall_back_to_the_univariate_forecast_with_a_note(client: FlaskClient, key: str) -> None:
    """Covariates of pure noise: where no effect can be told from zero, or the holdout finds no gain, the answer is
    the univariate forecast itself, and the note says which."""
    plain = post(client, key, plain_body()).get_json()
    fallbacks = 0
    for seed in range(6):
        body = plain_body()
        rng = random.Random(seed)
        body["series"][0]["covariates"] = [{"name": "noise", "history": [rng.gauss(0, 1) for _ in range(POINTS)],
                                            "future": [rng.gauss(0, 1) for _ in range(HORIZON)]}]
        answer = post(client, key, body).get_json()
        outcome = answer["covariates"]
        assert outcome["names"] == ["noise"]
        if not outcome["used"]:
            fallbacks += 1
            assert "no covariate had an effect" in outcome["note"] or "holdout" in outcome["note"]
            assert {name: answer[name] for name in plain} == plain
        else:
            assert outcome["note"] is None
    assert fallbacks


def test_past_only_and_categorical_covariates_and_their_design_columns(client: FlaskClient, key: str) -> None:
    body = promotion_body()
    weather = ["sun", "rain", "fog"]
    body["series"][0]["covariates"] += [
        {"name": "footfall", "history": [float(i % 11) for i in range(POINTS)]},  # past-only: future left out
        {"name": "weather", "history": [weather[i % 3] for i in range(POINTS)],
         "future": [weather[i % 2] for i in range(HORIZON)]},
    ]
    response = post(client, key, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    outcome = response.get_json()["covariates"]
    assert outcome["names"] == ["promo", "footfall", "weather=rain", "weather=sun"]
    assert isinstance(outcome["used"], bool)


def test_holidays_in_the_horizon_and_calendar_columns(client: FlaskClient, key: str) -> None:
    points = 120
    stamps = days(points, datetime(2025, 9, 1))  # to 2025-12-29; the horizon runs into January
    values = [50.0 + (i % 7) for i in range(points)]
    body = {"series": [{"timestamps": stamps, "values": values}], "forecast_horizon": 10,
            "data_frequency": "Daily", "forecast_frequency": "Daily",
            "holidays": {"country": "US", "subdivision": "CA", "window": 2}, "calendar_features": ["day_of_week"]}
    response = post(client, key, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    outcome = response.get_json()["covariates"]
    assert outcome["names"] == ["holiday", "holiday_near", "day_of_week=Tue", "day_of_week=Wed",
                                "day_of_week=Thu", "day_of_week=Fri", "day_of_week=Sat", "day_of_week=Sun"]
    assert outcome["holidays_in_horizon"] == [{"date": "2026-01-01", "name": "New Year's Day"}]
    assert response.get_json()["forecast_timestamps"][0] == "2025-12-30T00:00:00"


def test_holidays_that_drive_the_series_show_in_the_forecast(client: FlaskClient, key: str) -> None:
    """A daily series that drops by 50 on US holidays: the forecast drops on Christmas and New Year's Day."""
    import holidays

    start, points = datetime(2024, 1, 1), 719  # to 2025-12-19
    calendar = holidays.country_holidays("US", years=[2024, 2025])
    rng = random.Random(1)
    values = [100 + 8 * math.sin(2 * math.pi * i / 7) - 50 * ((start + timedelta(days=i)).date() in calendar)
              + rng.gauss(0, 2) for i in range(points)]
    body = {"series": [{"timestamps": days(points, start), "values": values}], "forecast_horizon": HORIZON,
            "data_frequency": "Daily", "forecast_frequency": "Daily", "holidays": {"country": "US", "window": 0}}
    response = post(client, key, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    assert answer["covariates"] == {"used": True, "names": ["holiday"], "note": None, "holidays_in_horizon": [
        {"date": "2025-12-25", "name": "Christmas Day"}, {"date": "2026-01-01", "name": "New Year's Day"}]}
    median = dict(zip((t[:10] for t in answer["forecast_timestamps"]), answer["median"], strict=True))
    for holiday in ("2025-12-25", "2026-01-01"):
        others = [value for day, value in median.items() if day not in ("2025-12-25", "2026-01-01")]
        assert median[holiday] < min(others) - 25


def test_missing_values_leave_their_covariate_rows_out(client: FlaskClient, key: str) -> None:
    body = promotion_body()
    body["series"][0]["values"][5] = None
    body["series"][0]["values"][50] = None
    response = post(client, key, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    assert answer["missing_values"] == 2
    assert answer["covariates"]["used"] is True


def test_models_say_they_take_covariates(client: FlaskClient, key: str) -> None:
    models = client.get("/models", headers=bearer(key)).get_json()["models"]
    assert [m["covariates"] for m in models] == [True, True, True, True]


# --- refusals: each a 4xx naming its field ------------------------------------------------------------------------


def with_covariates(*covariates: dict[str, Any]) -> dict[str, Any]:
    body = plain_body()
    body["series"][0]["covariates"] = list(covariates)
    return body


def numbers(count: int) -> list[float]:
    return [float(i % 5) for i in range(count)]


FIELD = "series[0].covariates"


@pytest.mark.parametrize(
    ("covariates", "field", "issue", "extra"),
    [
        pytest.param([{"name": "p", "history": numbers(POINTS - 1), "future": numbers(HORIZON)}],
                     f"{FIELD}[0].history", "one value per timestamp", {"expected": POINTS}, id="short history"),
        pytest.param([{"name": "p", "history": numbers(POINTS), "future": numbers(HORIZON + 1)}],
                     f"{FIELD}[0].future", "one value per forecast period", {"expected": HORIZON}, id="long future"),
        pytest.param([{"name": "p", "history": numbers(POINTS), "future": [*numbers(HORIZON - 1), None]}],
                     f"{FIELD}[0].future", "every forecast period", {"index": HORIZON - 1},
                     id="future for some rows only"),
        pytest.param([{"name": "p", "history": [*numbers(POINTS - 1), None], "future": numbers(HORIZON)}],
                     f"{FIELD}[0].history", "missing value (null)", {"index": POINTS - 1}, id="null in history"),
        pytest.param([{"name": "p", "history": numbers(POINTS), "future": [1, "a", *numbers(HORIZON - 2)]}],
                     f"{FIELD}[0].future", "all numbers or all strings", {"index": 1}, id="mixed kinds"),
        pytest.param([{"name": "p", "history": numbers(POINTS), "future": numbers(HORIZON)},
                      {"name": "p", "history": numbers(POINTS), "future": numbers(HORIZON)}],
                     f"{FIELD}[1].name", "duplicate", {}, id="duplicate names"),
        pytest.param([{"name": "", "history": numbers(POINTS)}], f"{FIELD}[0].name", "1 to 100", {}, id="empty name"),
        pytest.param([{"name": f"c{i}", "history": numbers(POINTS)} for i in range(21)], FIELD,
                     "at most 20 covariates", {"maximum": 20}, id="21 covariates"),
        pytest.param([{"name": "k", "history": [f"v{i % 21}" for i in range(POINTS)]}], f"{FIELD}[0].history",
                     "at most 20 distinct values", {"maximum": 20}, id="21 categories"),
        pytest.param([{"name": f"k{j}", "history": [f"v{i % 20}" for i in range(POINTS)]} for j in range(3)], FIELD,
                     "at most 50 design columns", {"maximum": 50, "provided": "57 columns"}, id="57 columns"),
        pytest.param([{"name": "k", "history": ["a"] * POINTS}], f"{FIELD}[0].history", "at least two distinct",
                     {}, id="one category"),
        pytest.param([{"name": "k", "history": ["a", "b"] * (POINTS // 2), "future": ["c"] * HORIZON}],
                     f"{FIELD}[0].future", "never seen in the history", {"index": 0, "provided": "c"},
                     id="unseen category"),
    ],
)
def test_bad_covariates_are_422_naming_the_field(client: FlaskClient, key: str, covariates: list[dict[str, Any]],
                                                 field: str, issue: str, extra: dict[str, Any]) -> None:
    refused(post(client, key, with_covariates(*covariates)), 422, field, issue, **extra)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_covariate_values_are_422(client: FlaskClient, key: str, literal: str) -> None:
    body = with_covariates({"name": "p", "history": numbers(POINTS), "future": numbers(HORIZON)})
    raw = json.dumps(body).replace('"future": [0.0,', f'"future": [{literal},', 1)
    assert literal in raw
    response = client.post("/forecast", headers={**bearer(key), "Content-Type": "application/json"}, data=raw)
    refused(response, 422, f"{FIELD}[0].future", "finite number", index=0)


@pytest.mark.parametrize(
    ("holidays", "calendar", "field", "issue", "extra"),
    [
        pytest.param({"country": "XX"}, None, "holidays.country", "unknown country", {"provided": "XX"},
                     id="unknown country"),
        pytest.param({"country": "us"}, None, "holidays.country", "unknown country", {}, id="lower-case country"),
        pytest.param({"country": "US", "subdivision": "ZZ"}, None, "holidays.subdivision", "unknown subdivision",
                     {"provided": "ZZ"}, id="unknown subdivision"),
        pytest.param({"country": "US", "window": 8}, None, "holidays.window", "between 0 and 7", {"provided": 8},
                     id="window 8"),
        pytest.param({"country": "US", "window": -1}, None, "holidays.window", "between 0 and 7", {},
                     id="window -1"),
        pytest.param(None, ["weekday"], "calendar_features[0]", "Must be one of: hour, day_of_week, month",
                     {"provided": "weekday"}, id="unknown feature"),
        pytest.param(None, ["month", "month"], "calendar_features[1]", "duplicate", {}, id="duplicate feature"),
        pytest.param(None, ["hour"], "calendar_features[0]", "single value", {"value": "0"}, id="hour of days"),
    ],
)
def test_bad_holidays_and_calendar_features_are_422(client: FlaskClient, key: str, holidays: dict[str, Any] | None,
                                                    calendar: list[str] | None, field: str, issue: str,
                                                    extra: dict[str, Any]) -> None:
    body = plain_body()
    if holidays is not None:
        body["holidays"] = holidays
    if calendar is not None:
        body["calendar_features"] = calendar
    details = refused(post(client, key, body), 422, field, issue, **extra)
    if field == "holidays.subdivision":
        assert "CA" in details["allowed"]


@pytest.mark.parametrize(
    ("change", "field", "issue"),
    [
        pytest.param(lambda b: b["series"][0].update(covariates={"name": "p"}), "series[0].covariates",
                     "Not a valid list", id="covariates not a list"),
        pytest.param(lambda b: b["series"][0].update(covariates=[{"history": numbers(POINTS)}]),
                     "series[0].covariates[0].name", "Required field is missing", id="no name"),
        pytest.param(lambda b: b["series"][0].update(covariates=[{"name": "p", "history": 3}]),
                     "series[0].covariates[0].history", "Must be an array", id="history not an array"),
        pytest.param(lambda b: b["series"][0].update(covariates=[{"name": "p", "history": numbers(POINTS),
                                                                  "futur": numbers(HORIZON)}]),
                     "series[0].covariates[0].futur", "Unknown field", id="misspelt future"),
        pytest.param(lambda b: b.update(holidays={"country": "US", "window": "1"}), "holidays.window",
                     "Not a valid integer", id="window as text"),
        pytest.param(lambda b: b.update(holidays={"country": "US", "windows": 1}), "holidays.windows",
                     "Unknown field", id="misspelt window"),
        pytest.param(lambda b: b.update(holidays={}), "holidays.country", "Required field is missing",
                     id="no country"),
        pytest.param(lambda b: b.update(calendar_features="month"), "calendar_features", "Not a valid list",
                     id="features not a list"),
        pytest.param(lambda b: b["series"].append(dict(b["series"][0])), "series", "exactly one series",
                     id="covariates on two series"),
        pytest.param(lambda b: b.update(covariates=b["series"][0].pop("covariates")), "covariates",
                     "belong to the series", id="covariates beside the series"),
    ],
)
def test_badly_shaped_covariate_fields_are_400(client: FlaskClient, key: str, change: Any, field: str,
                                               issue: str) -> None:
    body = promotion_body()
    change(body)
    refused(post(client, key, body), 400, field, issue)


def test_series_defects_come_before_covariate_defects(client: FlaskClient, key: str) -> None:
    body = with_covariates({"name": "p", "history": numbers(3)})
    body["series"][0]["values"][4] = "x"
    refused(post(client, key, body), 422, "series[0].values", "must be a number", index=4)
