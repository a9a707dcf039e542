"""A browser showing a dashboard page asks for an icon; that request carries no key and must never count as a
failed sign-in against the address's allowance (AUTH_FAILURE_LIMIT), which wrong keys typed into the sign-in form
spend from."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import build_app, services_of, settings_for

ALLOWANCE = 3
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')
ICON_LINK = re.compile(r'<link rel="icon" href="([^"]+)"')


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    settings = settings_for(f"sqlite:///{tmp_path / 'dash.sqlite3'}", data_dir=tmp_path,
                            auth_failure_limit=f"{ALLOWANCE}/minute")
    application = build_app(settings)
    yield application
    services_of(application).close()


def _wrong_key_sign_in(client: FlaskClient) -> int:
    page = client.get("/dashboard/sign-in").get_data(as_text=True)
    token = TOKEN.search(page)
    assert token is not None
    return client.post("/dashboard/sign-in", data={"csrf_token": token.group(1), "api_key": "ak_" + "1" * 64}
                       ).status_code


def test_icon_requests_need_no_key_and_spend_no_sign_in_allowance(app: Flask) -> None:
    client = app.test_client()
    page = client.get("/dashboard/sign-in").get_data(as_text=True)
    link = ICON_LINK.search(page)
    assert link is not None, "the page names its icon, so the browser asks for that, not /favicon.ico"
    for _ in range(3 * ALLOWANCE):  # every page view of a browser that ignores the link, and the link itself
        icon = client.get(link.group(1))
        assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
        assert icon.get_data().startswith(b"<svg")
        fallback = client.get("/favicon.ico")
        assert fallback.status_code == 204 and "X-RateLimit-Limit" not in fallback.headers
    # The address's whole allowance is still there for the person signing in.
    assert [_wrong_key_sign_in(client) for _ in range(ALLOWANCE)] == [401] * ALLOWANCE
    assert _wrong_key_sign_in(client) == 429


def test_every_dashboard_page_names_the_icon(app: Flask) -> None:
    client = app.test_client()
    for path in ("/dashboard/sign-in", "/dashboard/no-such-page"):
        assert ICON_LINK.search(client.get(path).get_data(as_text=True)), path
