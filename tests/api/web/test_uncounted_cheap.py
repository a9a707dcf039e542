"""Uncounted endpoints stay cheap, so a key with a tiny limit cannot spend the server's CPU through them:
GET /openapi.json is serialised once per process and answered with an ETag (304 when unchanged), and
GET /monitors/metrics is rendered at most once a second per account and process (docs/contract.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from app.monitors.payloads import exposition
from tests.support import bearer, build_app, new_key, services_of, settings_for


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('cheap') / 'keys.sqlite3'}"))
    yield application
    application.extensions["monitors"].sender.stop()
    services_of(application).close()


def test_the_openapi_document_is_serialised_once_and_revalidated(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    key, _ = new_key(app, per_minute=1, per_hour=1, per_day=1)
    client = app.test_client()
    first = client.get("/openapi.json", headers=bearer(key))
    assert first.status_code == 200 and first.headers["ETag"]
    dumps = []
    original = app.json.dumps
    monkeypatch.setattr(app.json, "dumps", lambda obj, **kw: dumps.append(1) or original(obj, **kw))
    again = client.get("/openapi.json", headers=bearer(key))
    assert again.get_data() == first.get_data() and again.headers["ETag"] == first.headers["ETag"]
    assert dumps == []  # nothing serialised again
    unchanged = client.get("/openapi.json", headers={**bearer(key), "If-None-Match": first.headers["ETag"]})
    assert unchanged.status_code == 304 and unchanged.get_data() == b""


def test_monitor_metrics_are_rendered_at_most_once_a_second_per_account(
        app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    admin, _ = new_key(app, ("read", "write", "admin"), account_id="acct-flood", per_minute=1)
    other, _ = new_key(app, ("read", "write", "admin"), account_id="acct-other")
    client = app.test_client()
    clock = [1000.0]
    renders: list[str] = []
    original = exposition.render

    def counting(*, database: object, account_id: str) -> str:
        renders.append(account_id)
        return original(database=database, account_id=account_id)

    monkeypatch.setattr(exposition, "render", counting)
    monkeypatch.setattr(exposition, "clock", lambda: clock[0])
    answers = [client.get("/monitors/metrics", headers=bearer(admin)) for _ in range(20)]
    assert {answer.status_code for answer in answers} == {200}
    assert renders == ["acct-flood"]
    client.get("/monitors/metrics", headers=bearer(other))
    assert renders == ["acct-flood", "acct-other"]
    clock[0] += 1.5  # a second later, the next request renders again
    assert client.get("/monitors/metrics", headers=bearer(other)).status_code == 200
    assert renders == ["acct-flood", "acct-other", "acct-other"]
