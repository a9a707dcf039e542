"""The dashboard's monitor pages answer the monitors' refusals as pages, with the status the API gives them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, build_app, new_key, services_of, settings_for

TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
UNKNOWN = "mon_" + "0" * 24


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path / 'dash.sqlite3'}", data_dir=tmp_path))
    yield application
    services_of(application).close()


def signed_in(app: Flask) -> tuple[FlaskClient, str, str]:
    """A browser signed in (the dashboard takes admin keys) with its form token, and the key."""
    key, _ = new_key(app, ("read", "write", "admin"))
    client = app.test_client()
    token = TOKEN.search(client.get("/dashboard/sign-in").get_data(as_text=True))
    assert token is not None
    assert client.post("/dashboard/sign-in", data={"csrf_token": token.group(1), "api_key": key}).status_code == 302
    page = TOKEN.search(client.get("/dashboard/monitors").get_data(as_text=True))
    assert page is not None
    return client, page.group(1), key


def test_an_unknown_monitor_is_a_404_page(app: Flask) -> None:
    client, _, _ = signed_in(app)
    response = client.get(f"/dashboard/monitors?monitor={UNKNOWN}")
    assert response.status_code == 404 and response.mimetype == "text/html"
    assert "No such monitor." in response.get_data(as_text=True)


def test_refused_feedback_is_a_page_with_the_apis_status(app: Flask) -> None:
    client, token, key = signed_in(app)
    monitor = client.post("/monitors", json={"name": "m", "data_frequency": "Hours"}, headers=bearer(key))
    assert monitor.status_code == 201, monitor.get_json()
    monitor_id = monitor.get_json()["id"]
    cases = [
        (UNKNOWN, "2026-01-05T00:00:00Z", 404, "No such monitor."),
        (monitor_id, "yesterday", 422, "Invalid points: invalid timestamp format."),
        (monitor_id, "2026-01-05T00:00:00Z", 404, "No stored point at that timestamp."),
    ]
    for target, stamp, status, message in cases:
        response = client.post(f"/dashboard/monitors/{target}/feedback", data={"csrf_token": token,
                                                                               "timestamp": stamp})
        assert response.status_code == status and response.mimetype == "text/html", (target, stamp)
        page = response.get_data(as_text=True)
        assert "Not marked" in page and message in page, page
