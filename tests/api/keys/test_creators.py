"""Keys made by keys: revoking a key revokes every key it created (and theirs), whichever door revokes it, and
listings name each key's creator. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, build_app, new_key, postgres_database, services_of, settings_for

ADMIN = ["read", "write", "admin"]


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
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def create(client: FlaskClient, actor: str, permissions: list[str] = ADMIN) -> dict:
    answer = client.post("/keys", json={"permissions": permissions}, headers=bearer(actor))
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()


def works(client: FlaskClient, key: str) -> bool:
    return client.get("/keys", headers=bearer(key)).status_code == 200


def test_revoking_a_key_revokes_the_keys_it_created_and_theirs(app: Flask, client: FlaskClient) -> None:
    root, root_id = new_key(app, tuple(ADMIN), name="ops")
    child = create(client, root)
    grandchild = create(client, child["key"])
    sibling = create(client, root)
    bystander, _ = new_key(app, tuple(ADMIN), name="other")
    assert all(works(client, key) for key in (child["key"], grandchild["key"], sibling["key"]))

    answer = client.post(f"/keys/{child['id']}/revoke", headers=bearer(root))
    assert answer.status_code == 200 and answer.get_json()["status"] == "revoked"
    assert answer.get_json()["revoked_with"] == [grandchild["id"]]
    assert not works(client, child["key"]) and not works(client, grandchild["key"])
    assert works(client, sibling["key"]) and works(client, root)

    client.post(f"/keys/{sibling['id']}/revoke", headers=bearer(bystander))
    listed = {key["id"]: key for key in client.get("/keys", headers=bearer(root)).get_json()["keys"]}
    assert listed[grandchild["id"]]["status"] == "revoked"
    assert listed[sibling["id"]]["status"] == "revoked"


def test_listings_show_the_creator(app: Flask, client: FlaskClient) -> None:
    root, root_id = new_key(app, tuple(ADMIN), name="ops")
    child = create(client, root)
    assert child["created_by"] == root_id
    listed = {key["id"]: key for key in client.get("/keys", headers=bearer(root)).get_json()["keys"]}
    assert listed[root_id]["created_by"] is None  # made by the operator's command line
    assert listed[child["id"]]["created_by"] == root_id
    assert client.get(f"/keys/{child['id']}", headers=bearer(root)).get_json()["created_by"] == root_id
    spec = client.get("/openapi.json", headers=bearer(root)).get_json()
    assert "created_by" in spec["components"]["schemas"]["Key"]["properties"]


def test_a_replacement_takes_its_predecessors_place(app: Flask, client: FlaskClient) -> None:
    """A rotated key's replacement has the old key's creator: revoking that creator revokes it too, and
    revoking the old key after a rotation leaves the replacement working."""
    root, root_id = new_key(app, tuple(ADMIN), name="ops")
    child = create(client, root)
    rotated = client.post(f"/keys/{child['id']}/rotate", json={"grace_seconds": 60}, headers=bearer(child["key"]))
    assert rotated.status_code == 201, rotated.get_json()
    replacement = rotated.get_json()["new_key"]
    assert replacement["created_by"] == root_id and rotated.get_json()["old_key"]["created_by"] == root_id
    assert client.post(f"/keys/{child['id']}/revoke", headers=bearer(replacement["key"])).status_code == 200
    assert works(client, replacement["key"])
    runner = app.test_cli_runner()
    assert runner.invoke(args=["keys", "revoke", root_id]).exit_code == 0
    services_of(app).keys.forget()  # a server trusts a key lookup for up to KEY_CACHE_SECONDS
    assert not works(client, replacement["key"])


def test_the_command_line_revokes_the_created_keys_and_shows_the_creator(app: Flask, client: FlaskClient) -> None:
    root, root_id = new_key(app, tuple(ADMIN), name="ops")
    child = create(client, root, ["read"])
    runner = app.test_cli_runner()
    shown = json.loads(runner.invoke(args=["keys", "show", child["id"], "--json"]).output)
    assert shown["created_by"] == root_id
    table = runner.invoke(args=["keys", "list"]).output.splitlines()
    assert "created by" in table[0] and any(child["id"] in row and root_id in row for row in table[1:])
    revoked = runner.invoke(args=["keys", "revoke", root_id])
    assert revoked.exit_code == 0 and f"also revoked: {child['id']}" in revoked.output
    assert client.post("/forecast", json={}, headers=bearer(child["key"])).status_code == 401
