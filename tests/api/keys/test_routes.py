"""The /keys API: own account only, never more than the caller holds, the plain key shown once, audited."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, build_app, new_key, postgres_database, services_of, settings_for

PLAIN_KEY = re.compile(r"ak_[0-9a-f]{64}")
ADMIN = ("read", "write", "admin")


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Flask]:
    if request.param == "sqlite":
        application = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}"))
        yield application
        services_of(application).close()
        return
    with postgres_database() as url:
        application = build_app(settings_for(url))
        yield application
        services_of(application).close()


@pytest.fixture
def admin(app: Flask) -> tuple[str, str]:
    return new_key(app, ADMIN, name="ops")


def create(client: FlaskClient, admin_key: str, **body: object) -> dict:
    response = client.post("/keys", json={"permissions": ["read"], **body}, headers=bearer(admin_key))
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def test_create_shows_the_plain_key_once_and_never_the_hash(client: FlaskClient, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    created = client.post(
        "/keys", json={"name": "reporting", "permissions": ["read"]}, headers=bearer(admin_key)
    )
    assert created.status_code == 201
    assert created.headers["Cache-Control"] == "no-store"
    body = created.get_json()
    assert PLAIN_KEY.fullmatch(body["key"])
    assert body["name"] == "reporting"
    assert body["permissions"] == ["read"]
    assert body["prefix"] == body["key"][:11] and body["last4"] == body["key"][-4:]
    assert body["display"] == f"{body['key'][:11]}…{body['key'][-4:]}"
    assert body["limits"] == {"per_minute": 50, "per_hour": 500, "per_day": 10000}
    assert body["status"] == "active" and body["revoked"] is None and body["usage_count"] == 0
    assert created.headers["Location"] == f"/keys/{body['id']}"

    # The new key works, and nothing afterwards shows it again.
    assert client.get("/verify", headers=bearer(body["key"])).status_code == 200
    listed = client.get("/keys", headers=bearer(admin_key))
    shown = client.get(f"/keys/{body['id']}", headers=bearer(admin_key))
    for response in (listed, shown):
        assert response.status_code == 200
        text = response.get_data(as_text=True)
        assert not PLAIN_KEY.search(text)
        assert "hash" not in text
    ids = [k["id"] for k in listed.get_json()["keys"]]
    assert body["id"] in ids and admin[1] in ids
    entry = shown.get_json()
    assert set(entry) >= {"id", "name", "prefix", "last4", "permissions", "limits", "created", "expires", "revoked",
                          "last_used", "usage_count"}


def test_only_admin_keys_manage_keys(client: FlaskClient, app: Flask) -> None:
    reader, _ = new_key(app, ("read", "write"))
    refused = client.get("/keys", headers=bearer(reader))
    assert refused.status_code == 403
    assert refused.get_json()["error"]["details"]["required_permission"] == "admin"
    missing = client.post("/keys", json={"permissions": ["read"]})
    assert missing.status_code == 401
    assert missing.get_json()["error"]["code"] == "UNAUTHORIZED"


def test_a_key_never_grants_what_its_creator_lacks(client: FlaskClient, app: Flask) -> None:
    admin_key, _ = new_key(app, ("read", "admin"), per_minute=20, per_hour=300, per_day=4000)
    beyond = client.post("/keys", json={"permissions": ["read", "write"]}, headers=bearer(admin_key))
    assert beyond.status_code == 403
    assert beyond.get_json()["error"]["details"]["field"] == "permissions"

    too_fast = client.post(
        "/keys", json={"permissions": ["read"], "limits": {"per_minute": 21}}, headers=bearer(admin_key)
    )
    assert too_fast.status_code == 403
    assert too_fast.get_json()["error"]["details"] == {
        "field": "per_minute", "issue": "must be at most 20, the acting key's own limit", "provided": 21
    }
    # A tier above the creator is refused too; the default limits are capped at the creator's.
    premium = client.post("/keys", json={"permissions": ["read"], "tier": "premium"}, headers=bearer(admin_key))
    assert premium.status_code == 403
    capped = create(client, admin_key)
    assert capped["limits"] == {"per_minute": 20, "per_hour": 300, "per_day": 4000}

    # Editing and rotating obey the same ceiling.
    raised = client.patch(
        f"/keys/{capped['id']}", json={"limits": {"per_day": 4001}}, headers=bearer(admin_key)
    )
    assert raised.status_code == 403
    stronger_id = new_key(app, ("read", "write", "delete"))[1]
    rotated = client.post(f"/keys/{stronger_id}/rotate", json={}, headers=bearer(admin_key))
    assert rotated.status_code == 403


def test_another_accounts_key_is_not_found(client: FlaskClient, app: Flask, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    _, foreign_id = new_key(app, ("read",), account_id="acme")
    for method, path, body in (
        ("get", f"/keys/{foreign_id}", None),
        ("post", f"/keys/{foreign_id}/revoke", None),
        ("post", f"/keys/{foreign_id}/rotate", {}),
        ("patch", f"/keys/{foreign_id}", {"name": "mine now"}),
        ("get", f"/keys/{foreign_id}/usage", None),
        ("get", "/keys/key_doesnotexist00/usage", None),
    ):
        response = client.open(path, method=method.upper(), json=body, headers=bearer(admin_key))
        assert response.status_code == 404, (method, path)
        assert response.get_json()["error"]["code"] == "INVALID_REQUEST"
    listed = client.get("/keys", headers=bearer(admin_key)).get_json()["keys"]
    assert foreign_id not in [k["id"] for k in listed]
    with services_of(app).database.transaction() as connection:
        from app.keys import store

        assert store.get_key(connection, key_id=foreign_id).revoked_at is None


def test_revoke_then_the_key_is_refused(client: FlaskClient, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    created = create(client, admin_key)
    assert client.get("/verify", headers=bearer(created["key"])).status_code == 200
    revoked = client.post(f"/keys/{created['id']}/revoke", headers=bearer(admin_key))
    assert revoked.status_code == 200
    assert revoked.get_json()["status"] == "revoked"
    refused = client.get("/verify", headers=bearer(created["key"]))
    assert refused.status_code == 401
    assert refused.get_json()["error"]["message"] == "This API key has been revoked."


def test_rotate_with_and_without_grace(client: FlaskClient, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    first = create(client, admin_key, name="batch")
    rotated = client.post(f"/keys/{first['id']}/rotate", json={"grace_seconds": 3600}, headers=bearer(admin_key))
    assert rotated.status_code == 201
    body = rotated.get_json()
    new, old = body["new_key"], body["old_key"]
    assert PLAIN_KEY.fullmatch(new["key"]) and new["name"] == "batch" and new["permissions"] == ["read"]
    assert old["rotated_to"] == new["id"] and old["status"] == "active"
    expires = datetime.strptime(old["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert client.get("/verify", headers=bearer(first["key"])).status_code == 200  # still in its grace
    assert client.get("/verify", headers=bearer(new["key"])).status_code == 200

    now = client.post(f"/keys/{new['id']}/rotate", json={"grace_seconds": 0}, headers=bearer(admin_key))
    assert now.status_code == 201
    assert client.get("/verify", headers=bearer(new["key"])).status_code == 401
    assert client.get("/verify", headers=bearer(now.get_json()["new_key"]["key"])).status_code == 200

    default = client.post(f"/keys/{now.get_json()['new_key']['id']}/rotate", headers=bearer(admin_key))
    assert default.status_code == 201  # no body: 24 hours of grace
    default_expiry = datetime.strptime(default.get_json()["old_key"]["expires"], "%Y-%m-%dT%H:%M:%SZ")
    assert timedelta(hours=23, minutes=59) < default_expiry.replace(tzinfo=UTC) - datetime.now(UTC)

    for grace in (-1, 7 * 86400 + 1, "1h", 1.5):
        bad = client.post(f"/keys/{first['id']}/rotate", json={"grace_seconds": grace}, headers=bearer(admin_key))
        assert bad.status_code == 400, grace
        assert bad.get_json()["error"]["details"]["field"] == "grace_seconds"
    gone = client.post(f"/keys/{new['id']}/rotate", json={}, headers=bearer(admin_key))
    assert gone.status_code == 400  # revoked: nothing to rotate
    assert "revoked" in gone.get_json()["error"]["message"]


def test_patch_name_tier_and_limits(client: FlaskClient, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    created = create(client, admin_key)
    renamed = client.patch(f"/keys/{created['id']}", json={"name": "renamed"}, headers=bearer(admin_key))
    assert renamed.status_code == 200 and renamed.get_json()["name"] == "renamed"
    tiered = client.patch(f"/keys/{created['id']}", json={"tier": "free"}, headers=bearer(admin_key))
    assert tiered.get_json()["tier"] == "free"
    assert tiered.get_json()["limits"] == {"per_minute": 10, "per_hour": 100, "per_day": 1000}
    custom = client.patch(
        f"/keys/{created['id']}", json={"limits": {"per_minute": 3, "per_hour": 30}}, headers=bearer(admin_key)
    )
    assert custom.get_json()["limits"] == {"per_minute": 3, "per_hour": 30, "per_day": 1000}
    # The new limit applies to the very next request of that key.
    for _ in range(3):
        assert client.get("/forecast-missing", headers=bearer(created["key"])).status_code == 404
    assert client.get("/verify", headers=bearer(created["key"])).get_json()["rateLimit"]["remaining"] == "0"

    for body, field in (({}, "body"), ({"limits": {"per_minute": 0}}, "limits.per_minute"),
                        ({"tier": "gold"}, "tier"), ({"name": "x" * 201}, "name"), ({"name": "a\x00b"}, "name"),
                        ({"colour": "red"}, "colour"),
                        ({"limits": {"per_minute": "5"}}, "limits.per_minute")):
        bad = client.patch(f"/keys/{created['id']}", json=body, headers=bearer(admin_key))
        assert bad.status_code == 400, body
        assert bad.get_json()["error"]["details"]["field"] == field, bad.get_json()


@pytest.mark.parametrize("app", ["sqlite"], indirect=True)  # validation answers before the database is asked
def test_create_validation_in_the_house_envelope(client: FlaskClient, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    cases = (
        ({"permissions": ["read", "fly"]}, "permissions[1]", "fly"),
        ({"permissions": []}, "permissions", "array of 0 items"),
        ({}, "permissions", None),
        ({"permissions": ["read"], "expires_at": "yesterday"}, "expires_at", "yesterday"),
        ({"permissions": ["read"], "expires_at": "2001-01-01T00:00:00Z"}, "expires_at", "2001-01-01T00:00:00+00:00"),
        ({"permissions": ["read"], "limits": {"per_week": 5}}, "limits.per_week", 5),
    )
    for body, field, provided in cases:
        response = client.post("/keys", json=body, headers=bearer(admin_key))
        assert response.status_code == 400, body
        error = response.get_json()["error"]
        assert error["code"] == "INVALID_REQUEST"
        assert error["details"]["field"] == field, error
        assert error["details"].get("provided") == provided, error
    # Several problems: the first in details, all of them in details.errors (the contract's envelope).
    several = client.post("/keys", json={"permissions": ["fly"], "tier": "gold"}, headers=bearer(admin_key))
    assert [e["field"] for e in several.get_json()["error"]["details"]["errors"]] == ["permissions[0]", "tier"]
    not_json = client.post("/keys", data="permissions=read", content_type="text/plain", headers=bearer(admin_key))
    assert not_json.status_code == 415
    array = client.post("/keys", json=["read"], headers=bearer(admin_key))
    assert array.status_code == 400
    empty = client.post("/keys", headers=bearer(admin_key))
    assert empty.status_code == 400


def test_every_change_is_logged_with_the_acting_key(
    client: FlaskClient, admin: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    admin_key, admin_id = admin
    with caplog.at_level(logging.INFO, logger="app.keys.audit"):
        created = create(client, admin_key)
        client.patch(f"/keys/{created['id']}", json={"name": "n"}, headers=bearer(admin_key))
        client.post(f"/keys/{created['id']}/rotate", json={"grace_seconds": 0}, headers=bearer(admin_key))
        client.post(f"/keys/{created['id']}/revoke", headers=bearer(admin_key))
    audit = [r.fields for r in caplog.records if r.name == "app.keys.audit"]  # type: ignore[attr-defined]
    assert [a["action"] for a in audit] == ["created", "updated", "rotated", "revoked"]
    assert {a["actor_key_id"] for a in audit} == {admin_id}
    assert {a["key_id"] for a in audit} == {created["id"]}
    assert not PLAIN_KEY.search(caplog.text)


def test_usage_history_and_live_windows(client: FlaskClient, app: Flask, admin: tuple[str, str]) -> None:
    admin_key, _ = admin
    created = create(client, admin_key, limits={"per_minute": 6})
    key = bearer(created["key"])
    statuses = [client.get("/verify", headers=key).status_code for _ in range(2)]
    statuses += [client.get("/no-such-endpoint", headers=key).status_code for _ in range(8)]
    assert statuses == [200, 200] + [404] * 6 + [429, 429]
    client.get("/verify", headers=bearer("ak_" + "0" * 64))  # a 401 has no key to count against
    services_of(app).usage.flush()

    usage = client.get(f"/keys/{created['id']}/usage?hours=24", headers=bearer(admin_key))
    assert usage.status_code == 200
    body = usage.get_json()
    assert body["key_id"] == created["id"] and body["hours"] == 24 and len(body["buckets"]) == 24
    # /verify is not counted against limits but is still a use of the key.
    assert body["totals"] == {"2xx": 2, "4xx": 6, "429": 2, "5xx": 0, "total": 10}
    # The requests are in the current clock hour's bucket, or (run across an hour) in it and the one before.
    recent = body["buckets"][-2:]
    assert {outcome: sum(b[outcome] for b in recent) for outcome in ("2xx", "4xx", "429", "5xx", "total")} == \
        {"2xx": 2, "4xx": 6, "429": 2, "5xx": 0, "total": 10}
    assert all(b["total"] == 0 for b in body["buckets"][:-2])
    assert [w["window"] for w in body["rate_limits"]] == ["minute", "hour", "day"]
    minute = body["rate_limits"][0]
    assert minute["limit"] == 6 and minute["remaining"] == 0 and minute["reset"] > time.time()
    assert client.get(f"/keys/{created['id']}", headers=bearer(admin_key)).get_json()["usage_count"] == 10

    default = client.get(f"/keys/{created['id']}/usage", headers=bearer(admin_key)).get_json()
    assert default["hours"] == 168 and len(default["buckets"]) == 168
    for hours in ("0", "2161", "week"):
        bad = client.get(f"/keys/{created['id']}/usage?hours={hours}", headers=bearer(admin_key))
        assert bad.status_code == 400
        assert bad.get_json()["error"]["details"]["field"] == "hours"


@pytest.mark.parametrize("app", ["sqlite"], indirect=True)  # the limits are counted outside the database
def test_key_calls_are_counted_against_the_callers_limits(client: FlaskClient, app: Flask) -> None:
    admin_key, _ = new_key(app, ("read", "admin"), per_minute=3)
    assert [client.get("/keys", headers=bearer(admin_key)).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_arbitrary_json_never_breaks_the_key_endpoints(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    application = build_app(settings_for(f"sqlite:///{tmp_path / 'fuzz.sqlite3'}"))
    try:
        admin_key, admin_id = new_key(application, ADMIN)
        _, target_id = new_key(application, ("read",))
        client = application.test_client()
        scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=30)
        values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                              | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=10)
        fields = st.sampled_from(["name", "permissions", "tier", "limits", "expires_at", "grace_seconds",
                                  "per_minute", "x"])
        bodies = st.dictionaries(fields, values, max_size=4) | values

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(body=bodies, target=st.sampled_from(["POST /keys", "PATCH", "rotate", "usage"]))
        def probe(body: object, target: str) -> None:
            headers = bearer(admin_key)
            if target == "POST /keys":
                response = client.post("/keys", json=body, headers=headers)
            elif target == "PATCH":
                response = client.patch(f"/keys/{target_id}", json=body, headers=headers)
            elif target == "rotate":
                # A key of the wrong account would be 404; this one exists, and rotation needs a valid grace.
                response = client.post(f"/keys/{admin_id}x/rotate", json=body, headers=headers)
            else:
                response = client.get(f"/keys/{target_id}/usage", query_string={"hours": str(body)[:20]},
                                      headers=headers)
            assert response.status_code in {200, 201, 400, 403, 404, 429}, (target, body, response.get_data())
            if response.status_code >= 400:
                error = response.get_json()["error"]
                assert error["code"] in {"INVALID_REQUEST", "UNAUTHORIZED", "RATE_LIMIT_EXCEEDED"}
                assert error["message"]

        probe()
    finally:
        services_of(application).close()
