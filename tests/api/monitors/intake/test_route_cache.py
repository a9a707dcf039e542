"""The routes of remote-written label sets a process keeps: only those some monitor takes, within a byte bound per
account and in all (app.monitors.intake.route_cache.RouteCache); an unmatched or unusable label set is never kept,
and a series whose route was let go is routed again, as before, when it comes back."""

from __future__ import annotations

from collections.abc import Iterator

import cramjam
import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.monitors.intake import remote_write
from app.monitors.intake.prompb.remote_pb2 import WriteRequest
from app.monitors.intake.route_cache import RouteCache
from tests.support import build_app, new_key, services_of, settings_for

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}
T0_MS = 1_767_225_600_000
PER_ACCOUNT, TOTAL = 150_000, 250_000


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    application = build_app(settings_for(f"sqlite:///{tmp_path_factory.mktemp('routes') / 'keys.sqlite3'}"))
    yield application
    application.extensions["monitors"].sender.stop()
    services_of(application).close()


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> RouteCache:
    cache = RouteCache(per_account=PER_ACCOUNT, total=TOTAL)
    monkeypatch.setattr(remote_write, "ROUTES", cache)
    return cache


def _key(app: Flask, account: str) -> dict[str, str]:
    plain, _ = new_key(app, permissions=("read", "write"), account_id=account, **BIG_LIMITS)
    return {"Authorization": f"Bearer {plain}"}


def _write(client: FlaskClient, headers: dict[str, str], label_sets: list[dict[str, str]], minute: int = 0) -> None:
    request = WriteRequest()
    for labels in label_sets:
        entry = request.timeseries.add()
        for name, value in sorted(labels.items()):
            label = entry.labels.add()
            label.name, label.value = name, value
        sample = entry.samples.add()
        sample.timestamp, sample.value = T0_MS + minute * 60_000, 1.0 + minute
    answer = client.post("/api/v1/write", data=bytes(cramjam.snappy.compress_raw(request.SerializeToString())),
                         headers={**headers, "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"})
    assert answer.status_code == 204, answer.get_data(as_text=True)


def _wide(metric: str, index: int) -> dict[str, str]:
    """A label set of about 10 kB."""
    return {"__name__": metric, "job": "api", **{f"l{i}": f"{index}-{i}-" + "v" * 1000 for i in range(10)}}


def test_unmatched_and_unusable_label_sets_are_never_kept(app: Flask, routes: RouteCache) -> None:
    client = app.test_client()
    headers = _key(app, "acct-routes-none")
    _write(client, headers, [_wide("nobody_takes", i) for i in range(30)])
    _write(client, headers, [{"job": "no name"}, {"__name__": "bad", "1x": "name"}])
    assert routes.account_entries("acct-routes-none") == 0 and routes.bytes == 0


def test_matched_routes_are_kept_within_the_bytes_of_an_account_and_of_all(app: Flask, routes: RouteCache) -> None:
    client = app.test_client()
    first, second = _key(app, "acct-routes-1"), _key(app, "acct-routes-2")
    monitors = {}
    for account, headers in (("acct-routes-1", first), ("acct-routes-2", second)):
        created = client.post("/monitors", headers=headers, json={
            "name": "wide", "data_frequency": "Minutes", "remote_write_selector": 'wide{job="api"}'})
        assert created.status_code == 201, created.json
        monitors[account] = created.json["id"]
    _write(client, first, [_wide("wide", i) for i in range(3)])
    kept = routes.account_entries("acct-routes-1")
    assert kept == 3 and 30_000 < routes.account_bytes("acct-routes-1") < PER_ACCOUNT
    # Forty label sets of about 10 kB each: over the account's bound, its oldest routes go.
    _write(client, first, [_wide("wide", i) for i in range(40)], minute=1)
    assert 0 < routes.account_bytes("acct-routes-1") <= PER_ACCOUNT
    assert routes.account_entries("acct-routes-1") < 40
    # Another account's routes push the first's out past the bound over all accounts.
    _write(client, second, [_wide("wide", i) for i in range(40)])
    _write(client, second, [_wide("wide", i) for i in range(20)], minute=1)
    assert routes.bytes <= TOTAL
    assert 0 < routes.account_bytes("acct-routes-2") <= PER_ACCOUNT
    # A series whose route was let go is routed again when it comes back: every point of every series stored.
    _write(client, first, [_wide("wide", i) for i in range(40)], minute=2)
    listed = client.get(f"/monitors/{monitors['acct-routes-1']}/series?limit=100&points=10", headers=first).json
    assert len(listed["series"]) == 40
    counts = sorted(len(entry["points"]) for entry in listed["series"])
    assert counts == [2] * 37 + [3] * 3, counts
