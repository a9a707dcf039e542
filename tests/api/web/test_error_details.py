"""Every error answer carries code, message and details (README, docs/contract.md "Every error"), the 401s
included: their details name the header and what was wrong with it, never the key sent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.serving.refusals import Answer
from tests.support import ROOT, bearer, build_app, new_key, services_of, settings_for

KEY = "ak_" + "0" * 64


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('details') / 'keys.sqlite3'}"))
    yield application
    services_of(application).close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.mark.parametrize(("headers", "issue"), [
    ({}, "missing API key"),
    ({"Authorization": KEY}, "no Bearer word"),
    ({"Authorization": "Basic dXNlcjpwYXNz"}, "unsupported authorization scheme"),
    ({"Authorization": "Bearer ak_123"}, "malformed API key"),
    ({"Authorization": f"Bearer {KEY}"}, "unknown API key"),
])
def test_every_401_names_the_header_and_the_problem(client: FlaskClient, headers: dict[str, str],
                                                    issue: str) -> None:
    answer = client.get("/verify", headers=headers)
    assert answer.status_code == 401
    error = answer.get_json()["error"]
    assert error["code"] == "UNAUTHORIZED" and error["message"]
    assert error["details"] == {"field": "Authorization", "issue": issue}
    assert KEY not in answer.get_data(as_text=True)


def test_revoked_and_expired_keys_say_so_in_details(app: Flask, client: FlaskClient) -> None:
    revoked, key_id = new_key(app, ("read",))
    client.post(f"/keys/{key_id}/revoke", headers=bearer(new_key(app, ("read", "admin"))[0]))
    services_of(app).keys.forget()
    assert client.get("/verify", headers=bearer(revoked)).get_json()["error"]["details"] == {
        "field": "Authorization", "issue": "revoked API key"}
    expiring, expiring_id = new_key(app, ("read",), expires_at=datetime.now(UTC) + timedelta(hours=1))
    from sqlalchemy import update

    from app.keys.records import api_keys_table

    with services_of(app).database.transaction() as connection:
        connection.execute(update(api_keys_table).where(api_keys_table.c.id == expiring_id)
                           .values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    assert client.get("/verify", headers=bearer(expiring)).get_json()["error"]["details"] == {
        "field": "Authorization", "issue": "expired API key"}


def test_errors_without_more_to_say_still_carry_details(app: Flask, client: FlaskClient) -> None:
    missing = client.get("/no-such-path", headers={**bearer(new_key(app)[0]), "Accept": "application/json"})
    assert missing.status_code == 404 and isinstance(missing.get_json()["error"]["details"], dict)
    assert b'"details"' in Answer(501, "The request's Transfer-Encoding is not supported.").encode()


def test_the_contract_and_readme_say_every_error_has_details() -> None:
    contract = (ROOT / "docs" / "contract.md").read_text()
    row = next(line for line in contract.splitlines() if line.startswith("| 401 | `UNAUTHORIZED`"))
    assert "none" not in row.split("|")[4]
    assert '{"error": {"code", "message", "details"}}' in (ROOT / "README.md").read_text()
