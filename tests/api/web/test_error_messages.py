"""Errors that say what would have been accepted: the body size limit in the 413, the timestamp form in
"invalid timestamp format" (on SQLite and the real PostgreSQL where points are stored)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from tests.support import bearer, build_app, new_key, services_of, settings_for

FORM = "YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM]"


@pytest.mark.parametrize(("limit", "said"), [(1 << 20, "1 MiB"), (16 << 20, "16 MiB"), (1_000_000, "1,000,000 bytes")])
def test_the_413_names_the_limit(tmp_path: Path, limit: int, said: str) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}", max_body_bytes=limit))
    try:
        key, _ = new_key(app, ("read", "write"))
        client = app.test_client()
        body = b"[" + b"1," * (limit // 2) + b"1]"
        headers = {**bearer(key), "Content-Type": "application/json"}
        declared = client.post("/forecast", data=body, headers=headers)  # werkzeug's 413, from Content-Length
        chunked = client.post("/monitors", input_stream=io.BytesIO(body),  # read to the cap: no length declared
                              headers={**headers, "Transfer-Encoding": "chunked"})
        admin, _ = new_key(app, ("read", "admin"))
        keys_chunked = client.post("/keys", input_stream=io.BytesIO(body),  # /keys once answered 400 here
                                   headers={**bearer(admin), "Content-Type": "application/json",
                                            "Transfer-Encoding": "chunked"})
        for response in (declared, chunked, keys_chunked):
            assert response.status_code == 413
            assert response.get_json()["error"]["message"] == (
                f"The request body is larger than the {said} the service accepts.")
    finally:
        services_of(app).close()


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    application = build_app(settings_for(database_url))
    yield application
    services_of(application).close()


def test_invalid_timestamp_format_says_the_expected_form(app: Flask) -> None:
    key, _ = new_key(app, ("read", "write"))
    client = app.test_client()
    days = [f"2026-01-{day:02d}T00:00:00" for day in range(1, 13)]
    days[4] = "2026-01-05T00:00"  # a date alone is midnight; a time without seconds is no form
    forecast = client.post("/forecast", json={
        "series": [{"timestamps": days, "values": list(range(12))}], "forecast_horizon": 3,
        "data_frequency": "Daily", "forecast_frequency": "Daily"}, headers=bearer(key))
    assert forecast.status_code == 422
    details = forecast.get_json()["error"]["details"]
    assert (details["issue"], details["index"], details["provided"]) == ("invalid timestamp format", 4,
                                                                         "2026-01-05T00:00")
    assert details["expected"] == FORM

    monitor = client.post("/monitors", json={"name": "m", "data_frequency": "Daily"}, headers=bearer(key)).get_json()
    points = client.post(f"/monitors/{monitor['id']}/points", json={"timestamps": ["2026-01-05T00:00"], "values": [1]},
                         headers=bearer(key))
    assert points.status_code == 422
    assert points.get_json()["error"]["details"] == {
        "field": "timestamps", "issue": "invalid timestamp format", "provided": "2026-01-05T00:00", "index": 0,
        "expected": FORM,
    }
