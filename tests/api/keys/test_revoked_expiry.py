"""A revoked key shows that it is revoked and no expiry still to come, in the API's answers about it and on the
dashboard's key pages: a rotated key keeps its grace end as `expires` until it is revoked, which ends it sooner."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.dashboard import sessions
from tests.support import bearer, build_app, new_key, services_of, settings_for


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}"))
    yield application
    services_of(application).close()


def moment(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def test_a_rotated_then_revoked_key_shows_no_future_expiry(app: Flask, client: FlaskClient) -> None:
    admin_key, _ = new_key(app, ("read", "write", "admin"), name="ops")
    made = client.post("/keys", json={"name": "nightly", "permissions": ["read"]}, headers=bearer(admin_key))
    old_id = made.get_json()["id"]
    rotated = client.post(f"/keys/{old_id}/rotate", json={"grace_seconds": 86400}, headers=bearer(admin_key))
    in_grace = rotated.get_json()["old_key"]
    assert in_grace["status"] == "active" and moment(in_grace["expires"]) > datetime.now(UTC)  # its grace end

    revoked = client.post(f"/keys/{old_id}/revoke", headers=bearer(admin_key))
    assert revoked.status_code == 200
    for body in (revoked.get_json(), client.get(f"/keys/{old_id}", headers=bearer(admin_key)).get_json(),
                 next(k for k in client.get("/keys", headers=bearer(admin_key)).get_json()["keys"]
                      if k["id"] == old_id)):
        assert body["status"] == "revoked" and body["revoked"] is not None
        assert body["expires"] is None or moment(body["expires"]) <= moment(body["revoked"]), body

    # The dashboard, signed in with the admin key, says revoked and shows no expiry for it.
    with app.test_request_context():
        token, _ = sessions.start(services_of(app).database, services_of(app).keys.lookup(admin_key))
    client.set_cookie(sessions.COOKIE_NAME, token)
    page = client.get(f"/dashboard/keys/{old_id}").get_data(as_text=True)
    assert re.search(r'id="key-status">revoked<', page)
    assert 'id="key-revoked"' in page and 'id="key-expires"' not in page
    listed = client.get("/dashboard/keys").get_data(as_text=True)
    row = listed[listed.index(f'data-key-id="{old_id}"'):]
    row = row[:row.index("</tr>")]
    assert "revoked 20" in row and "expires" not in row.replace("its expiry", "")
