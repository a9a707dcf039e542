"""Dashboard sessions and forms in-process: sign-in rules, CSRF, expiry, revocation, the API identity."""

from __future__ import annotations

import re
import stat
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.dashboard import sessions
from app.settings import Settings
from tests.support import build_app, new_key, services_of, settings_for

ADMIN = ("read", "write", "admin")
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    settings = settings_for(f"sqlite:///{tmp_path / 'dash.sqlite3'}", data_dir=tmp_path, auth_failure_limit="5/minute")
    application = build_app(settings)
    yield application
    services_of(application).close()


def form_token(client: FlaskClient, path: str = "/dashboard/sign-in") -> str:
    match = TOKEN.search(client.get(path).get_data(as_text=True))
    assert match is not None
    return match.group(1)


def sign_in(client: FlaskClient, key: str) -> FlaskClient:
    response = client.post("/dashboard/sign-in", data={"csrf_token": form_token(client), "api_key": key})
    assert response.status_code == 302, response.get_data(as_text=True)
    return client


def test_sign_in_sets_a_strict_httponly_session_cookie_and_keeps_no_key(app: Flask) -> None:
    key, key_id = new_key(app, ADMIN)
    client = app.test_client()
    token = form_token(client)
    response = client.post("/dashboard/sign-in", data={"csrf_token": token, "api_key": key})
    assert response.status_code == 302 and response.headers["Location"] == "/dashboard/keys"
    cookie = next(c for c in response.headers.getlist("Set-Cookie") if c.startswith("dashboard_session="))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie and "Secure" not in cookie
    assert key not in cookie
    expires = datetime.strptime(re.search(r"Expires=([^;]+)", cookie).group(1), "%a, %d %b %Y %H:%M:%S GMT")
    assert timedelta(hours=11, minutes=59) < expires.replace(tzinfo=UTC) - datetime.now(UTC) <= timedelta(hours=12)
    with services_of(app).database.transaction() as connection:
        from sqlalchemy import select

        from app.keys.records import dashboard_sessions_table

        row = connection.execute(select(dashboard_sessions_table)).one()
    assert row.key_id == key_id and key not in (row.token_hash, row.csrf_token)

    https = app.test_client()
    secure_token = form_token(https, "https://localhost/dashboard/sign-in")
    answer = https.post("https://localhost/dashboard/sign-in", data={"csrf_token": secure_token, "api_key": key})
    assert "Secure" in next(c for c in answer.headers.getlist("Set-Cookie") if c.startswith("dashboard_session="))


def test_sign_in_refusals_say_why(app: Flask) -> None:
    reader, _ = new_key(app, ("read", "write"))
    client = app.test_client()
    cases = (
        (reader, 403, "needs the admin permission, and this key has only read, write"),
        ("not-a-key", 401, "ak_ followed by 64 lowercase hexadecimal characters"),
        ("ak_" + "1" * 64, 401, "No such API key."),
        ("", 400, "Enter an API key"),
    )
    for key, status, words in cases:
        response = client.post("/dashboard/sign-in", data={"csrf_token": form_token(client), "api_key": key})
        assert response.status_code == status, key
        assert words in response.get_data(as_text=True)
        assert 'aria-invalid="true"' in response.get_data(as_text=True)
    revoked, revoked_id = new_key(app, ADMIN)
    with services_of(app).database.transaction() as connection:
        from app.keys import store

        store.revoke_key(connection, key_id=revoked_id)
    response = client.post("/dashboard/sign-in", data={"csrf_token": form_token(client), "api_key": revoked})
    assert response.status_code == 401 and "This API key is revoked." in response.get_data(as_text=True)


def test_failed_sign_ins_spend_the_failed_authentication_allowance(app: Flask) -> None:
    client = app.test_client()
    statuses = [
        client.post("/dashboard/sign-in", data={"csrf_token": form_token(client), "api_key": "ak_" + "2" * 64})
        .status_code
        for _ in range(6)
    ]
    assert statuses == [401] * 5 + [429]


def test_sign_in_csrf_is_required_and_bound_to_the_browser(app: Flask) -> None:
    key, _ = new_key(app, ADMIN)
    client = app.test_client()
    token = form_token(client)
    assert client.post("/dashboard/sign-in", data={"api_key": key}).status_code == 400
    assert client.post("/dashboard/sign-in", data={"csrf_token": "x" * 64, "api_key": key}).status_code == 400
    # A token from another browser (another seed cookie) is useless here.
    other = app.test_client()
    assert other.post("/dashboard/sign-in", data={"csrf_token": token, "api_key": key}).status_code == 400
    assert client.post("/dashboard/sign-in", data={"csrf_token": token, "api_key": key}).status_code == 302


def test_every_dashboard_form_needs_the_sessions_csrf_token(app: Flask) -> None:
    key, key_id = new_key(app, ADMIN)
    client = sign_in(app.test_client(), key)
    posts = (
        ("/dashboard/keys", {"permissions": "read"}),
        (f"/dashboard/keys/{key_id}/edit", {"name": "x"}),
        (f"/dashboard/keys/{key_id}/rotate", {"grace_seconds": "0"}),
        (f"/dashboard/keys/{key_id}/revoke", {}),
        ("/dashboard/sign-out", {}),
    )
    for path, data in posts:
        for token in (None, "forged"):
            body = dict(data) if token is None else {**data, "csrf_token": token}
            response = client.post(path, data=body)
            assert response.status_code == 400, (path, token)
            assert "security token" in response.get_data(as_text=True)
    # Nothing changed: the key is active and unrenamed, the session still works.
    assert client.get("/dashboard/keys").status_code == 200
    page = client.get(f"/dashboard/keys/{key_id}").get_data(as_text=True)
    assert 'id="key-status">active' in page


def test_form_errors_appear_next_to_their_fields(app: Flask) -> None:
    key, _ = new_key(app, ("read", "admin"), per_minute=20)
    client = sign_in(app.test_client(), key)
    token = form_token(client, "/dashboard/keys")
    response = client.post("/dashboard/keys", data={"csrf_token": token, "per_minute": "fast"})
    page = response.get_data(as_text=True)
    assert response.status_code == 400
    assert 'id="permissions-error">Choose at least one permission.' in page
    assert 'id="create-per_minute-error">Enter a whole number of at least 1.' in page
    beyond = client.post("/dashboard/keys", data={"csrf_token": token, "permissions": ["read", "write"]})
    assert beyond.status_code == 400
    assert "A key cannot grant permissions its creator lacks: write." in beyond.get_data(as_text=True)
    def expiring(on: str) -> str:
        data = {"csrf_token": token, "permissions": "read", "expires_on": on}
        return client.post("/dashboard/keys", data=data).get_data(as_text=True)

    assert 'id="expires_on-error">Choose a date in the future.' in expiring("2001-01-01")
    assert 'id="expires_on-error">Enter a date as YYYY-MM-DD.' in expiring("soon")
    assert "2099-03-04 00:00 UTC" in expiring("2099-03-04")
    created = client.post("/dashboard/keys", data={"csrf_token": token, "permissions": "read", "name": "ok"})
    assert created.status_code == 201 and created.headers["Cache-Control"] == "no-store"
    assert re.search(r'value="ak_[0-9a-f]{64}"', created.get_data(as_text=True))


def test_expired_signed_out_or_revoked_sessions_return_to_sign_in(app: Flask) -> None:
    key, key_id = new_key(app, ADMIN)
    services = services_of(app)
    admin = services.keys.get_by_id(key_id)
    assert admin is not None

    expired_token, _ = sessions.start(services.database, admin, now=datetime.now(UTC) - timedelta(hours=12, seconds=1))
    client = app.test_client()
    client.set_cookie(sessions.COOKIE_NAME, expired_token)
    response = client.get("/dashboard/keys")
    assert response.status_code == 302 and response.headers["Location"] == "/dashboard/sign-in?expired=1"
    assert "Your session has ended" in client.get("/dashboard/sign-in?expired=1").get_data(as_text=True)

    live = sign_in(app.test_client(), key)
    token = form_token(live, "/dashboard/keys")
    assert live.get("/verify", headers={"X-CSRF-Token": token}).status_code == 200
    assert live.post("/dashboard/sign-out", data={"csrf_token": token}).status_code == 302
    assert live.get("/dashboard/keys").headers["Location"].startswith("/dashboard/sign-in")
    assert live.get("/verify", headers={"X-CSRF-Token": token}).status_code == 401

    # Revoking the session's own key ends the session with it.
    again = sign_in(app.test_client(), key)
    token = form_token(again, "/dashboard/keys")
    response = again.post(f"/dashboard/keys/{key_id}/revoke", data={"csrf_token": token})
    assert response.headers["Location"] == "/dashboard/sign-in?expired=1"
    services.keys.forget()
    assert again.get("/dashboard/keys").status_code == 302


def test_the_api_accepts_a_session_only_with_its_csrf_header(app: Flask) -> None:
    key, _ = new_key(app, ADMIN)
    client = sign_in(app.test_client(), key)
    token = form_token(client, "/dashboard/keys")
    assert client.get("/verify").status_code == 401  # the cookie alone (what a forged request carries)
    assert client.get("/verify", headers={"X-CSRF-Token": "wrong"}).status_code == 401
    allowed = client.get("/keys", headers={"X-CSRF-Token": token})
    assert allowed.status_code == 200 and allowed.headers["X-RateLimit-Limit"] == "200"
    # An explicit key header wins over the session.
    reader, _ = new_key(app, ("read",))
    as_reader = client.get("/keys", headers={"X-CSRF-Token": token, "Authorization": f"Bearer {reader}"})
    assert as_reader.status_code == 403


def test_pages_send_no_store_and_a_strict_content_security_policy(app: Flask) -> None:
    key, _ = new_key(app, ADMIN)
    client = sign_in(app.test_client(), key)
    for path in ("/dashboard/keys", "/dashboard/playground", "/dashboard/reference", "/dashboard/sign-in"):
        response = client.get(path)
        policy = response.headers.get("Content-Security-Policy", "")
        if path.endswith("sign-in"):
            assert response.status_code == 302  # already signed in
            continue
        assert response.status_code == 200, path
        assert response.headers["Cache-Control"] == "no-store"
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert client.get("/dashboard/static/vendor/uplot/uPlot.iife.min.js").status_code == 200
    assert client.get("/dashboard/static/../views.py").status_code == 404


def test_secret_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = Settings(database_url="sqlite://", data_dir=tmp_path).resolved_secret_key()
    second = replace(Settings(database_url="sqlite://"), data_dir=tmp_path).resolved_secret_key()
    assert first == second and len(first) == 64
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
    assert Settings(database_url="sqlite://", data_dir=tmp_path, secret_key="given").resolved_secret_key() == "given"


def test_dashboard_addresses_answer_with_pages(app: Flask) -> None:
    client = app.test_client()
    assert client.get("/dashboard").headers["Location"] == "/dashboard/sign-in"
    assert client.get("/dashboard/").headers["Location"] == "/dashboard/sign-in"
    missing = client.get("/dashboard/no-such-page")
    assert missing.status_code == 404 and missing.mimetype == "text/html"
    key, _ = new_key(app, ADMIN)
    sign_in(client, key)
    assert client.get("/dashboard").headers["Location"] == "/dashboard/keys"
    assert client.get("/dashboard/keys/key_unknown").status_code == 404
