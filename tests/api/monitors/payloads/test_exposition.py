"""GET /monitors/metrics is uncounted, so a loop of requests must not keep a process rendering: an account's
exposition that took long to render is served for RENDER_COST_FACTOR times as long (it was rendered again a second
later, so a 10-second rendering ran back to back), and while one request renders it again the others get the last
one at once instead of waiting in line behind it. The clock is the module's own (exposition.clock), moved by hand."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from app.monitors.payloads import exposition
from tests.support import bearer, build_app, new_key, services_of, settings_for


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('expo') / 'keys.sqlite3'}"))
    yield application
    application.extensions["monitors"].sender.stop()
    services_of(application).close()


class Renders:
    """exposition.render as it is, counted, each rendering taking ``seconds`` on the module's clock; a rendering
    waits for ``release`` once ``hold`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
        self.now = 1000.0
        self.seconds = seconds
        self.accounts: list[str] = []
        self.hold = False
        self.entered, self.release = threading.Event(), threading.Event()
        original = exposition.render

        def rendering(*, database: Any, account_id: str) -> Any:
            self.accounts.append(account_id)
            if self.hold:
                self.entered.set()
                self.release.wait(30)
            body = original(database=database, account_id=account_id)
            self.now += self.seconds
            return body

        monkeypatch.setattr(exposition, "render", rendering)
        monkeypatch.setattr(exposition, "clock", lambda: self.now)


def _monitor(app: Flask, headers: dict[str, str], name: str) -> None:
    created = app.test_client().post("/monitors", headers=headers, json={"name": name, "data_frequency": "Minutes"})
    assert created.status_code == 201, created.json


def test_a_slow_rendering_is_served_for_its_cost_factor_times_as_long(
        app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    admin, _ = new_key(app, ("read", "write", "admin"), account_id="acct-slow-render")
    renders = Renders(monkeypatch, seconds=10.0)
    client = app.test_client()
    assert client.get("/monitors/metrics", headers=bearer(admin)).status_code == 200
    assert renders.accounts == ["acct-slow-render"]
    # The rendering ended at 1010; a loop of requests for the next 100 s gets it again.
    for moment in (1011.0, 1050.0, 1100.0, 1109.0):
        renders.now = moment
        assert client.get("/monitors/metrics", headers=bearer(admin)).status_code == 200
    assert renders.accounts == ["acct-slow-render"]
    renders.now = 1111.0
    assert client.get("/monitors/metrics", headers=bearer(admin)).status_code == 200
    assert renders.accounts == ["acct-slow-render"] * 2


def test_while_one_request_renders_again_the_others_get_the_last_rendering_at_once(
        app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    admin, _ = new_key(app, ("read", "write", "admin"), account_id="acct-rerender")
    headers = bearer(admin)
    _monitor(app, headers, "first monitor")
    renders = Renders(monkeypatch, seconds=0.0)
    first = app.test_client().get("/monitors/metrics", headers=headers).get_data(as_text=True)
    assert "first monitor" in first
    _monitor(app, headers, "second monitor")
    renders.now += 5.0  # older than REUSE_SECONDS: the next request renders again
    renders.hold = True
    answers: dict[str, str] = {}

    def get(name: str) -> None:
        answers[name] = app.test_client().get("/monitors/metrics", headers=headers).get_data(as_text=True)

    renderer = threading.Thread(target=get, args=("renderer",), daemon=True)
    other = threading.Thread(target=get, args=("other",), daemon=True)
    try:
        renderer.start()
        assert renders.entered.wait(10), "the rendering request never rendered"
        other.start()
        other.join(10)
        assert not other.is_alive(), "a request waited for another request's rendering"
        assert answers["other"] == first
    finally:
        renders.release.set()
        renderer.join(30)
        other.join(30)
    assert "second monitor" in answers["renderer"]
    assert renders.accounts == ["acct-rerender"] * 2
