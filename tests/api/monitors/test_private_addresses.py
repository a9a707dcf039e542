"""The private-address refusal names the field it is about (webhook_url, prometheus_url, alertmanager_url),
says how to allow it, and never tells which address a name resolved to; README says how a local trial
enables it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import ROOT, bearer, build_app, new_key, services_of, settings_for


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('private') / 'keys.sqlite3'}"))
    yield application
    application.extensions["monitors"].sender.stop()
    services_of(application).close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.mark.parametrize(("fields", "field"), [
    ({"webhook_url": "https://localhost:8443/hook"}, "webhook_url"),
    ({"prometheus_url": "http://localhost:9090", "prometheus_query": "up"}, "prometheus_url"),
    ({"alertmanager_url": "http://localhost:9093"}, "alertmanager_url"),
])
def test_the_refusal_names_its_field_and_hides_the_address(app: Flask, client: FlaskClient, fields: dict[str, str],
                                                           field: str) -> None:
    key = new_key(app, ("read", "write"))[0]
    answer = client.post("/monitors", json={"name": "cpu", "data_frequency": "Minutes", **fields},
                         headers=bearer(key))
    assert answer.status_code == 400, answer.get_data(as_text=True)
    error = answer.get_json()["error"]
    assert error["details"]["field"] == field
    issue = error["details"]["issue"]
    assert f"{field} may point there only when the server sets ALLOW_PRIVATE_WEBHOOKS=1" in issue
    assert "webhooks" not in issue or field == "webhook_url"
    text = answer.get_data(as_text=True)
    assert "127.0.0.1" not in text and "::1" not in text


def test_readme_says_how_a_local_trial_allows_private_addresses() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "ALLOW_PRIVATE_WEBHOOKS=1 make run" in readme
