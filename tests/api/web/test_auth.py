"""Every authentication outcome through HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask

from app.keys import store
from app.keys import usage as usage_module
from tests.support import bearer, build_app, new_key, services_of, settings_for


@pytest.fixture(scope="module")
def db_app(module_database_url: str) -> Iterator[Flask]:
    """For outcomes that depend on what the database stores and returns: run on SQLite and on PostgreSQL."""
    app = build_app(settings_for(module_database_url))
    yield app
    services_of(app).close()


@pytest.fixture(scope="module")
def app(module_app: Flask) -> Flask:
    """For outcomes decided before the database is asked (or not about the database): SQLite only."""
    return module_app


def assert_unauthorized(response, fragment: str) -> None:
    assert response.status_code == 401
    body = response.get_json()
    assert body["error"]["code"] == "UNAUTHORIZED"
    assert fragment in body["error"]["message"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.headers["X-Request-Id"]


def test_missing_key_is_401(app: Flask) -> None:
    assert_unauthorized(app.test_client().get("/verify"), "Missing API key")


def test_malformed_key_is_401(app: Flask) -> None:
    client = app.test_client()
    for bad in ("ak_123", "ak_" + "g" * 64, "ak_" + "A" * 64, "xx_" + "a" * 64, "ak_" + "a" * 65):
        assert_unauthorized(client.get("/verify", headers=bearer(bad)), "Malformed")


def test_key_without_bearer_word_says_the_accepted_form(app: Flask) -> None:
    plain, _ = new_key(app)
    response = app.test_client().get("/verify", headers={"Authorization": plain})
    assert_unauthorized(response, "without the word Bearer")
    assert "Authorization: Bearer" in response.get_json()["error"]["message"]


def test_bearer_word_is_case_insensitive(app: Flask) -> None:
    plain, _ = new_key(app)
    response = app.test_client().get("/verify", headers={"Authorization": f"bEaReR {plain}"})
    assert response.status_code == 200


def test_unknown_key_is_401(db_app: Flask) -> None:
    new_key(db_app)
    assert_unauthorized(db_app.test_client().get("/verify", headers=bearer("ak_" + "0" * 64)), "Invalid API key")


def test_revoked_key_is_401(db_app: Flask) -> None:
    plain, key_id = new_key(db_app)
    client = db_app.test_client()
    assert client.get("/verify", headers=bearer(plain)).status_code == 200
    with services_of(db_app).database.transaction() as connection:
        store.revoke_key(connection, key_id=key_id)
    services_of(db_app).keys.forget()  # what the 5 s cache expiry does on its own
    assert_unauthorized(client.get("/verify", headers=bearer(plain)), "revoked")


def test_key_expires_at_the_exact_second(db_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    expires = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    plain, _ = new_key(db_app, expires_at=expires)
    client = db_app.test_client()

    import app.web.auth as auth_module

    class Clock(datetime):
        moment = expires - timedelta(microseconds=1)

        @classmethod
        def now(cls, tz=None):  # noqa: ANN206
            return cls.moment

    monkeypatch.setattr(auth_module, "datetime", Clock)
    assert client.get("/verify", headers=bearer(plain)).status_code == 200
    Clock.moment = expires
    assert_unauthorized(client.get("/verify", headers=bearer(plain)), "expired")


def test_missing_permission_is_403_with_unauthorized_code(db_app: Flask) -> None:
    plain, _ = new_key(db_app, permissions=("write",))
    response = db_app.test_client().post("/forecast", headers=bearer(plain), json={})
    assert response.status_code == 403
    error = response.get_json()["error"]
    assert error["code"] == "UNAUTHORIZED"
    assert error["details"]["required_permission"] == "read"


def test_verify_needs_only_a_valid_key(app: Flask) -> None:
    plain, _ = new_key(app, permissions=("delete",))
    assert app.test_client().get("/verify", headers=bearer(plain)).status_code == 200


def test_usage_counts_every_authenticated_request_but_not_401s(db_app: Flask) -> None:
    plain, key_id = new_key(db_app, permissions=("write",))
    client = db_app.test_client()
    client.get("/verify", headers=bearer(plain))  # 200
    client.post("/forecast", headers=bearer(plain), json={})  # 403, still authenticated
    client.get("/nowhere", headers=bearer(plain))  # 404
    client.get("/verify", headers=bearer("ak_" + "1" * 64))  # 401: not this key's
    services_of(db_app).usage.flush()
    with services_of(db_app).database.transaction() as connection:
        key = store.get_key(connection, key_id=key_id)
    assert key.usage_count == 3
    assert key.last_used_at is not None
    assert datetime.now(UTC) - key.last_used_at < timedelta(seconds=30)


def test_usage_survives_a_failed_flush(db_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, key_id = new_key(db_app)
    client = db_app.test_client()
    usage = services_of(db_app).usage
    for _ in range(3):
        client.get("/verify", headers=bearer(plain))
    monkeypatch.setattr(usage_module, "add_usage", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("db down")))
    assert usage.flush() is False
    monkeypatch.undo()
    client.get("/verify", headers=bearer(plain))
    assert usage.flush() is True
    with services_of(db_app).database.transaction() as connection:
        assert store.get_key(connection, key_id=key_id).usage_count == 4


def test_failed_authentication_is_limited_per_address(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", auth_failure_limit="3/minute"))
    client = app.test_client()
    plain, _ = new_key(app)
    bad = bearer("ak_" + "2" * 64)
    remaining = []
    for _ in range(3):
        response = client.get("/verify", headers=bad)
        assert response.status_code == 401
        remaining.append(response.headers["X-RateLimit-Remaining"])
        assert response.headers["X-RateLimit-Limit"] == "3"
    assert remaining == ["2", "1", "0"]
    blocked = client.get("/verify", headers=bad)
    assert blocked.status_code == 429
    assert blocked.get_json()["error"]["code"] == "RATE_LIMIT_EXCEEDED"
    assert int(blocked.headers["Retry-After"]) >= 1
    # Another address is unaffected, and a valid key from the blocked address still works.
    assert client.get("/verify", headers=bad, environ_base={"REMOTE_ADDR": "10.9.9.9"}).status_code == 401
    assert client.get("/verify", headers=bearer(plain)).status_code == 200
    services_of(app).close()


def test_require_https_refuses_plain_http_before_the_key(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", require_https=True, trusted_proxies=1))
    client = app.test_client()
    plain, _ = new_key(app)
    response = client.get("/verify", headers=bearer(plain))
    assert response.status_code == 403
    assert response.get_json()["error"] == {
        "code": "UNAUTHORIZED",
        "message": "HTTPS is required.",
        "details": {"required_scheme": "https"},
    }
    over_tls = client.get("/verify", headers={**bearer(plain), "X-Forwarded-Proto": "https"})
    assert over_tls.status_code == 200
    services_of(app).close()


def test_require_https_serves_no_sign_in_form_over_plain_http(tmp_path: Path) -> None:
    """The form itself is refused, so no key is ever typed into a page that would post it in clear."""
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", require_https=True, trusted_proxies=1))
    client = app.test_client()
    plain_http = client.get("/dashboard/sign-in")
    assert plain_http.status_code == 403
    page = plain_http.get_data(as_text=True)
    assert "HTTPS" in page and 'name="api_key"' not in page and "<form" not in page.split("<main", 1)[-1]
    over_tls = client.get("/dashboard/sign-in", headers={"X-Forwarded-Proto": "https"})
    assert over_tls.status_code == 200 and 'name="api_key"' in over_tls.get_data(as_text=True)
    services_of(app).close()


def test_forwarded_proto_is_ignored_without_trusted_proxies(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", require_https=True, trusted_proxies=0))
    plain, _ = new_key(app)
    spoofed = app.test_client().get("/verify", headers={**bearer(plain), "X-Forwarded-Proto": "https"})
    assert spoofed.status_code == 403
    services_of(app).close()


@pytest.mark.parametrize("trusted_proxies", [0, 1])
def test_failed_auth_limit_cannot_be_dodged_with_x_forwarded_for(tmp_path: Path, trusted_proxies: int) -> None:
    settings = settings_for(
        f"sqlite:///{tmp_path / 'k.sqlite3'}", auth_failure_limit="3/minute", trusted_proxies=trusted_proxies
    )
    app = build_app(settings)
    client = app.test_client()
    bad = bearer("ak_" + "3" * 64)
    statuses = []
    for attempt in range(6):
        # The attacker varies what it claims; a trusted proxy appends the real peer as the last hop.
        claimed = f"203.0.113.{attempt}"
        forwarded = claimed if trusted_proxies == 0 else f"{claimed}, 198.51.100.7"
        response = client.get("/verify", headers={**bad, "X-Forwarded-For": forwarded})
        statuses.append(response.status_code)
    assert statuses == [401, 401, 401, 429, 429, 429]
    services_of(app).close()
