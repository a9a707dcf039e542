"""GET /openapi.json and GET /metrics."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from openapi_spec_validator import validate

from app.keys.schemas import VerifyResponseSchema
from app.web.validation import ErrorSchema
from tests.support import bearer, new_key


@pytest.fixture(scope="module")
def app(module_app: Flask) -> Flask:
    """One app for the module: every test makes its own keys, so their counters never meet."""
    return module_app

PLAIN_KEY = re.compile(r"ak_[0-9a-f]{64}")


def test_openapi_document_is_valid_and_complete(app: Flask) -> None:
    key, _ = new_key(app)
    client = app.test_client()
    assert client.get("/openapi.json").status_code == 401
    response = client.get("/openapi.json", headers=bearer(key))
    assert response.status_code == 200
    spec = response.get_json()
    validate(spec)
    assert spec["info"]["version"] == "1.0.0"
    documented = set(spec["paths"])
    assert {"/forecast", "/verify", "/models", "/openapi.json", "/healthz", "/readyz", "/metrics"} <= documented
    # The API grows (keys, anomalies, monitors); whatever the document lists must be a route the app serves.
    routed = {re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule) for rule in app.url_map.iter_rules()}
    assert documented <= routed, documented - routed
    forecast = spec["paths"]["/forecast"]["post"]
    assert {p["name"] for p in forecast["parameters"]} == {"X-Model-Id", "X-Model-Selector"}
    assert set(forecast["responses"]) == {"200", "400", "401", "403", "413", "415", "422", "429", "500"}
    documented_headers = set(forecast["responses"]["200"]["headers"])
    assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-Model-Id"} <= documented_headers
    assert {"X-Forecast-Fallback", "X-Forecast-Warning", "X-Request-Id"} <= documented_headers
    assert "Retry-After" in forecast["responses"]["429"]["headers"]
    request_schema = spec["components"]["schemas"]["ForecastRequest"]["properties"]
    assert request_schema["forecast_horizon"] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert request_schema["confidence"]["default"] == 0.95
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert not PLAIN_KEY.search(response.get_data(as_text=True))


def test_openapi_is_not_counted(app: Flask) -> None:
    key, _ = new_key(app, per_minute=3)
    client = app.test_client()
    for _ in range(5):
        assert client.get("/openapi.json", headers=bearer(key)).status_code == 200
    assert client.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"] == "3"


def test_real_responses_match_the_documented_schemas(app: Flask) -> None:
    key, _ = new_key(app)
    client = app.test_client()
    assert VerifyResponseSchema().validate(client.get("/verify", headers=bearer(key)).get_json()) == {}
    for response in (
        client.get("/verify"),
        client.post("/forecast", headers=bearer(key), json={}),
        client.post("/forecast", headers=bearer(key), json={"series": [{"timestamps": [], "values": []}],
                                                          "forecast_horizon": 1, "data_frequency": "Daily",
                                                          "forecast_frequency": "Daily"}),
    ):
        assert ErrorSchema().validate(response.get_json()) == {}


def test_metrics_need_admin_count_requests_and_never_show_keys(app: Flask) -> None:
    reader, _ = new_key(app, permissions=("read",))
    admin, _ = new_key(app, permissions=("admin",), per_minute=2)
    client = app.test_client()
    client.get("/verify", headers=bearer(reader))
    client.post("/forecast", headers=bearer(reader), json={})
    client.get("/no/such/path/" + reader, headers=bearer(reader))
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer(reader)).status_code == 403
    for _ in range(3):  # a scrape is not counted against the admin key's 2/minute
        response = client.get("/metrics", headers=bearer(admin))
        assert response.status_code == 200
    assert response.headers["Content-Type"].count("charset") == 1
    text = response.get_data(as_text=True)
    assert 'forecast_http_requests_total{endpoint="/verify",method="GET",status="200"}' in text
    assert 'forecast_http_requests_total{endpoint="/forecast",method="POST",status="400"}' in text
    assert 'endpoint="unrouted"' in text
    assert "forecast_workers_ready" in text
    assert not PLAIN_KEY.search(text)


def test_every_schema_has_one_name_of_its_own() -> None:
    """Two schema classes of one name made apispec publish the second as `Series1`, a name a client generator
    would carry into code; each schema is added once, under the name its capability gives it."""
    import warnings

    from app import openapi_documenters
    from app.web.openapi import build_spec

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = build_spec(openapi_documenters())
    names = set(spec["components"]["schemas"])
    assert not {name for name in names if re.fullmatch(r".*[A-Za-z]\d+", name)}, names
    assert {"Series", "MonitorSeries"} <= names
