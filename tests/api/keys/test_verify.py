"""GET /verify as the contract gives it, plus the envelope and request ids."""

from __future__ import annotations

import re
import time

import pytest
from flask import Flask

from tests.support import bearer, new_key


@pytest.fixture(scope="module")
def app(module_app: Flask) -> Flask:
    """One app for the module: every test makes its own keys, so their counters never meet."""
    return module_app


def test_verify_body_matches_the_contract(app: Flask) -> None:
    plain, _ = new_key(app, permissions=("read", "write"))
    response = app.test_client().get("/verify", headers=bearer(plain))
    assert response.status_code == 200
    body = response.get_json()
    assert list(body) == ["success", "message", "timestamp", "apiKey", "rateLimit"]
    assert body["success"] is True
    assert isinstance(body["message"], str) and body["message"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["timestamp"])
    assert body["apiKey"] == {"permissions": ["read", "write"]}
    rate = body["rateLimit"]
    assert rate["limit"] == "100"  # Read/Write level, per minute
    assert rate["remaining"] == "100"  # /verify reports, it does not spend
    reset_ms = int(rate["resetTime"])
    assert abs(reset_ms / 1000 - (time.time() + 60)) < 5
    assert response.headers["X-RateLimit-Limit"] == "100"
    assert response.headers["X-RateLimit-Remaining"] == "100"
    assert int(response.headers["X-RateLimit-Reset"]) == reset_ms // 1000


def test_request_id_is_echoed_when_sane_and_made_otherwise(app: Flask) -> None:
    plain, _ = new_key(app)
    client = app.test_client()
    echoed = client.get("/verify", headers={**bearer(plain), "X-Request-Id": "abc-123"})
    assert echoed.headers["X-Request-Id"] == "abc-123"
    for insane in ("bad id with spaces", "x" * 129, "<script>", "a;b"):
        replaced = client.get("/verify", headers={**bearer(plain), "X-Request-Id": insane})
        assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["X-Request-Id"])
    unauthenticated = client.get("/verify")
    assert re.fullmatch(r"[0-9a-f]{32}", unauthenticated.headers["X-Request-Id"])


def test_flask_errors_use_the_envelope(app: Flask) -> None:
    plain, _ = new_key(app)
    client = app.test_client()
    not_found = client.get("/nope", headers=bearer(plain))
    assert not_found.status_code == 404
    assert not_found.get_json()["error"]["code"] == "INVALID_REQUEST"
    wrong_method = client.post("/verify", headers=bearer(plain))
    assert wrong_method.status_code == 405
    assert wrong_method.get_json()["error"]["code"] == "INVALID_REQUEST"
    assert "GET" in wrong_method.headers["Allow"]


def test_unexpected_exception_is_500_without_internals(app: Flask, monkeypatch, caplog) -> None:
    plain, _ = new_key(app)
    import app.keys.routes as verify_module

    def explode():  # noqa: ANN202
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(verify_module, "limit_status", explode)
    response = app.test_client().get("/verify", headers=bearer(plain))
    assert response.status_code == 500
    error = response.get_json()["error"]
    assert error["code"] == "INTERNAL_ERROR"
    assert "secret internal detail" not in response.get_data(as_text=True)
    assert error["details"]["request_id"] == response.headers["X-Request-Id"]
    assert any("secret internal detail" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_health_endpoints_need_no_key(app: Flask) -> None:
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    # This app runs without forecast workers, so it must not claim to be ready.
    assert ready.status_code == 503
    assert ready.get_json()["checks"]["database"] == "ok"
    assert ready.get_json()["checks"]["forecast_workers"] == "0/1"


def test_cors_is_off_by_default(app: Flask) -> None:
    plain, _ = new_key(app)
    client = app.test_client()
    response = client.get("/verify", headers={**bearer(plain), "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in response.headers
    preflight = client.options(
        "/forecast", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status_code == 401


def test_cors_for_configured_origins_only(tmp_path) -> None:
    from tests.support import build_app, services_of, settings_for

    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", cors_origins=("https://app.example",)))
    plain, _ = new_key(app)
    client = app.test_client()
    allowed = client.get("/verify", headers={**bearer(plain), "Origin": "https://app.example"})
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert "X-RateLimit-Remaining" in allowed.headers["Access-Control-Expose-Headers"]
    preflight = client.options(
        "/forecast", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status_code == 200
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    other = client.get("/verify", headers={**bearer(plain), "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers
    services_of(app).close()
