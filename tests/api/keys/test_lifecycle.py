"""A key cannot outlive, outrank or outlast its creator, on SQLite and on the real PostgreSQL.

- A key made (or rotated) by an expiring key expires no later than it; a later expiry asked for is refused.
- A key changes, rotates or revokes only keys whose permissions it holds itself.
- A rotated key in its grace period still works but manages no keys: a leaked old key cannot rotate the owner's
  replacement and lock the owner out.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, build_app, new_key, services_of, settings_for

FULL = ("read", "write", "admin", "delete")
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def app(database_url: str, tmp_path: Path) -> Iterator[Flask]:
    application = build_app(settings_for(database_url, data_dir=tmp_path))
    yield application
    services_of(application).close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def soon(seconds: float) -> datetime:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)


def test_a_key_made_by_an_expiring_key_expires_with_it(app: Flask, client: FlaskClient) -> None:
    ends = soon(3)
    admin_key, _ = new_key(app, FULL, expires_at=ends)
    made = client.post("/keys", json={"permissions": list(FULL)}, headers=bearer(admin_key))
    assert made.status_code == 201
    child = made.get_json()
    assert child["expires"] == iso(ends)  # left out: the creator's own expiry, not "never"

    later = client.post("/keys", json={"permissions": ["read"], "expires_at": iso(ends + timedelta(days=1))},
                        headers=bearer(admin_key))
    assert later.status_code == 403
    assert later.get_json()["error"]["details"] == {
        "field": "expires_at", "issue": f"must be at most {iso(ends)}, the acting key's own expiry",
        "provided": iso(ends + timedelta(days=1)),
    }
    earlier = client.post("/keys", json={"permissions": ["read"], "expires_at": iso(ends - timedelta(seconds=1))},
                          headers=bearer(admin_key))
    assert earlier.status_code == 201 and earlier.get_json()["expires"] == iso(ends - timedelta(seconds=1))

    before = client.get("/verify", headers=bearer(child["key"])).status_code  # asserted apart: no key in a report
    assert before == 200
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.2)
    for key in (admin_key, child["key"]):  # the child stops with its creator
        refused = client.get("/verify", headers=bearer(key))
        assert refused.status_code == 401
        assert refused.get_json()["error"]["message"] == "This API key has expired."


def test_a_key_that_never_expires_still_makes_keys_that_never_expire(app: Flask, client: FlaskClient) -> None:
    admin_key, _ = new_key(app, FULL)
    made = client.post("/keys", json={"permissions": ["read"]}, headers=bearer(admin_key))
    assert made.status_code == 201 and made.get_json()["expires"] is None
    chosen = client.post("/keys", json={"permissions": ["read"], "expires_at": "2099-01-01T00:00:00Z"},
                         headers=bearer(admin_key))
    assert chosen.status_code == 201 and chosen.get_json()["expires"] == "2099-01-01T00:00:00Z"


def test_a_replacement_expires_no_later_than_the_key_that_rotated_it(app: Flask, client: FlaskClient) -> None:
    ends = soon(3600)
    admin_key, _ = new_key(app, FULL, expires_at=ends)
    _, forever_id = new_key(app, ("read",))
    rotated = client.post(f"/keys/{forever_id}/rotate", json={"grace_seconds": 0}, headers=bearer(admin_key))
    assert rotated.status_code == 201
    assert rotated.get_json()["new_key"]["expires"] == iso(ends)
    _, short_id = new_key(app, ("read",), expires_at=ends - timedelta(minutes=5))
    kept = client.post(f"/keys/{short_id}/rotate", json={"grace_seconds": 0}, headers=bearer(admin_key))
    assert kept.status_code == 201
    assert kept.get_json()["new_key"]["expires"] == iso(ends - timedelta(minutes=5))  # the earlier one stays


def test_a_rotated_key_in_its_grace_period_manages_no_keys(app: Flask, client: FlaskClient) -> None:
    leaked_key, leaked_id = new_key(app, FULL, name="owner's key")
    rotated = client.post(f"/keys/{leaked_id}/rotate", json={"grace_seconds": 3600}, headers=bearer(leaked_key))
    assert rotated.status_code == 201
    replacement = rotated.get_json()["new_key"]

    # The leaked key tries to take the replacement away, and to mint a key of its own: both refused.
    for method, path, body in (
        ("POST", f"/keys/{replacement['id']}/rotate", {"grace_seconds": 0}),
        ("POST", f"/keys/{replacement['id']}/revoke", None),
        ("PATCH", f"/keys/{replacement['id']}", {"limits": {"per_minute": 1}}),
        ("POST", "/keys", {"permissions": list(FULL)}),
    ):
        refused = client.open(path, method=method, json=body, headers=bearer(leaked_key))
        assert refused.status_code == 403, (method, path)
        error = refused.get_json()["error"]
        assert error["code"] == "UNAUTHORIZED"
        assert f"rotated (replaced by {replacement['id']})" in error["message"]
        assert "can no longer manage keys" in error["message"]
        assert error["details"]["field"] == "Authorization" and error["details"]["provided"] == leaked_id

    # It still works for everything else through its grace period, and may still read the account's keys.
    still = [client.get(path, headers=bearer(leaked_key)).status_code for path in ("/verify", "/keys")]
    assert still == [200, 200]
    # The owner's replacement is untouched and manages keys.
    owner = bearer(replacement["key"])
    shown = client.get(f"/keys/{replacement['id']}", headers=owner).get_json()
    assert shown["status"] == "active" and shown["limits"] == replacement["limits"]
    works = [client.get("/verify", headers=owner).status_code,
             client.post("/keys", json={"permissions": ["read"]}, headers=owner).status_code]
    assert works == [200, 201]


def test_a_key_manages_only_keys_whose_permissions_it_holds(app: Flask, client: FlaskClient) -> None:
    full_key, full_id = new_key(app, FULL, name="owner")
    narrow_key, narrow_id = new_key(app, ("read", "admin"), name="helpdesk")
    _, reader_id = new_key(app, ("read",), name="reporting")

    for method, path, body in (
        ("POST", f"/keys/{full_id}/revoke", None),
        ("PATCH", f"/keys/{full_id}", {"limits": {"per_minute": 1}}),  # a downgrade is a change too
        ("PATCH", f"/keys/{full_id}", {"name": "mine now"}),
        ("POST", f"/keys/{full_id}/rotate", {"grace_seconds": 0}),
    ):
        refused = client.open(path, method=method, json=body, headers=bearer(narrow_key))
        assert refused.status_code == 403, (method, path)
        assert refused.get_json()["error"]["details"] == {
            "field": "id", "issue": "the key holds write, delete, which the acting key lacks", "provided": full_id,
        }
    untouched = client.get(f"/keys/{full_id}", headers=bearer(full_key)).get_json()
    assert untouched["status"] == "active" and untouched["name"] == "owner"
    assert untouched["limits"]["per_minute"] == 500
    works = client.get("/verify", headers=bearer(full_key)).status_code
    assert works == 200

    # Keys it covers, itself included, it manages as before; the broader key manages it.
    narrow, full = bearer(narrow_key), bearer(full_key)
    managed = [
        client.patch(f"/keys/{reader_id}", json={"name": "reports"}, headers=narrow).status_code,
        client.post(f"/keys/{reader_id}/revoke", headers=narrow).status_code,
        client.patch(f"/keys/{narrow_id}", json={"name": "desk"}, headers=narrow).status_code,
        client.post(f"/keys/{narrow_id}/revoke", headers=full).status_code,
    ]
    assert managed == [200, 200, 200, 200]


def _form_token(client: FlaskClient, path: str) -> str:
    match = TOKEN.search(client.get(path).get_data(as_text=True))
    assert match is not None
    return match.group(1)


def _signed_in(app: Flask, key: str) -> FlaskClient:
    browser = app.test_client()
    token = _form_token(browser, "/dashboard/sign-in")
    signed = browser.post("/dashboard/sign-in", data={"csrf_token": token, "api_key": key}).status_code
    assert signed == 302
    return browser


def test_the_dashboard_says_why_instead_of_failing(app: Flask) -> None:
    _, full_id = new_key(app, FULL, name="owner")
    narrow_key, _ = new_key(app, ("read", "admin"), name="helpdesk", expires_at=soon(3600))
    browser = _signed_in(app, narrow_key)
    token = _form_token(browser, "/dashboard/keys")

    revoke = browser.post(f"/dashboard/keys/{full_id}/revoke", data={"csrf_token": token})
    assert revoke.status_code == 403
    assert "a key may only change, rotate or revoke keys whose permissions it holds itself" in revoke.get_data(
        as_text=True)
    later = browser.post("/dashboard/keys",
                         data={"csrf_token": token, "permissions": "read", "expires_on": "2099-01-01"})
    assert later.status_code == 400
    assert 'id="expires_on-error">A key cannot outlive its creator' in later.get_data(as_text=True)
