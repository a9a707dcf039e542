"""Rate limits as the contract gives them: counts, rolling windows, headers, 429s, shared Redis, fail closed."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

import app.web.ratelimit as ratelimit_module
from app.keys import store
from tests.support import (
    REDIS_URL,
    bearer,
    build_app,
    flush_redis,
    free_port,
    missing_service,
    new_key,
    redis_available,
    services_of,
    settings_for,
)


@pytest.fixture(scope="module")
def app(module_app: Flask) -> Flask:
    """One app for the module: every test makes its own keys, so their counters never meet."""
    return module_app

BAD_BODY = {"series": []}  # refused with 400 after the limiter has counted it


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    import limits.storage.memory as memory_storage

    fake = FakeClock()
    monkeypatch.setattr(memory_storage, "time", fake)
    monkeypatch.setattr(ratelimit_module, "time", fake)
    return fake


def spend(client: FlaskClient, key: str):  # noqa: ANN201
    return client.post("/forecast", headers=bearer(key), json=BAD_BODY)


def test_exact_count_and_headers(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=5)
    remaining = []
    for _ in range(5):
        response = spend(client, key)
        assert response.status_code == 400
        assert response.headers["X-RateLimit-Limit"] == "5"
        remaining.append(response.headers["X-RateLimit-Remaining"])
    assert remaining == ["4", "3", "2", "1", "0"]
    refused = spend(client, key)
    assert refused.status_code == 429
    error = refused.get_json()["error"]
    assert error["code"] == "RATE_LIMIT_EXCEEDED"
    assert error["details"]["limit"] == 5
    assert error["details"]["window"] == "minute"
    reset = datetime.strptime(error["details"]["reset_time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert 0 < reset.timestamp() - clock.now <= 61
    assert 1 <= int(refused.headers["Retry-After"]) <= 61
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["X-RateLimit-Reset"]) == int(reset.timestamp())


def test_windows_roll(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=2)
    assert spend(client, key).status_code == 400
    clock.advance(30)
    assert spend(client, key).status_code == 400
    assert spend(client, key).status_code == 429
    clock.advance(30.5)  # the first request left its 60 s window; the second has not
    assert spend(client, key).status_code == 400
    assert spend(client, key).status_code == 429
    clock.advance(60)
    assert spend(client, key).headers["X-RateLimit-Remaining"] == "1"


def test_429s_do_not_count(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=2)
    spend(client, key), spend(client, key)
    for _ in range(10):
        assert spend(client, key).status_code == 429
    clock.advance(61)
    assert spend(client, key).headers["X-RateLimit-Remaining"] == "1"


def test_hour_window_binds_when_tighter(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=100, per_hour=3, per_day=1000)
    responses = [spend(client, key) for _ in range(3)]
    assert [r.headers["X-RateLimit-Limit"] for r in responses] == ["3", "3", "3"]
    assert [r.headers["X-RateLimit-Remaining"] for r in responses] == ["2", "1", "0"]
    refused = spend(client, key)
    assert refused.status_code == 429 and refused.get_json()["error"]["details"]["window"] == "hour"
    clock.advance(61)
    assert spend(client, key).status_code == 429
    clock.advance(3600)
    assert spend(client, key).status_code == 400


def test_day_window_binds_when_tighter(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=100, per_hour=100, per_day=2)
    spend(client, key), spend(client, key)
    refused = spend(client, key)
    assert refused.get_json()["error"]["details"]["window"] == "day"
    clock.advance(3601)
    assert spend(client, key).status_code == 429
    clock.advance(86400)
    assert spend(client, key).status_code == 400


def test_tie_reports_the_shortest_window(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=5, per_hour=5, per_day=100)
    response = spend(client, key)
    assert response.headers["X-RateLimit-Remaining"] == "4"
    assert int(response.headers["X-RateLimit-Reset"]) <= clock.now + 61


def test_verify_neither_spends_nor_is_refused(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, per_minute=2)
    for _ in range(5):
        assert client.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"] == "2"
    spend(client, key), spend(client, key)
    verify = client.get("/verify", headers=bearer(key))
    assert verify.status_code == 200
    assert verify.get_json()["rateLimit"] == {
        "limit": "2",
        "remaining": "0",
        "resetTime": verify.get_json()["rateLimit"]["resetTime"],
    }
    assert int(verify.get_json()["rateLimit"]["resetTime"]) // 1000 == int(verify.headers["X-RateLimit-Reset"])


def test_every_authenticated_status_counts(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, permissions=("write",), per_minute=10)
    assert client.post("/forecast", headers=bearer(key), json={}).status_code == 403
    assert client.get("/nowhere", headers=bearer(key)).status_code == 404
    assert client.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"] == "8"


def test_missing_permission_wins_over_429(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, _ = new_key(app, permissions=("write",), per_minute=1)
    assert client.post("/forecast", headers=bearer(key), json={}).status_code == 403
    assert client.post("/forecast", headers=bearer(key), json={}).status_code == 403  # the check order: 403 before 429


def test_new_limits_apply_after_the_cache_expires(app: Flask, client: FlaskClient, clock: FakeClock) -> None:
    key, key_id = new_key(app, per_minute=2)
    spend(client, key), spend(client, key)
    assert spend(client, key).status_code == 429
    with services_of(app).database.transaction() as connection:
        store.set_limits(connection, key_id=key_id, per_minute=4)
    services_of(app).keys.forget()  # what the 5 s cache expiry does on its own
    response = spend(client, key)
    # The counters are kept per limit value, so a changed limit starts its windows afresh (README).
    assert response.status_code == 400
    assert response.headers["X-RateLimit-Limit"] == "4" and response.headers["X-RateLimit-Remaining"] == "3"


@pytest.fixture
def redis_apps(tmp_path: Path) -> Iterator[tuple[Flask, Flask]]:
    if not redis_available():
        missing_service(f"Redis is not reachable at {REDIS_URL}")
    flush_redis()
    settings = settings_for(f"sqlite:///{tmp_path / 'shared.sqlite3'}", redis_url=REDIS_URL)
    first, second = build_app(settings), build_app(settings)
    yield first, second
    services_of(first).close(), services_of(second).close()
    flush_redis()


def test_redis_counters_are_shared_between_apps(redis_apps: tuple[Flask, Flask]) -> None:
    first, second = redis_apps
    key, _ = new_key(first, per_minute=4)
    a, b = first.test_client(), second.test_client()
    assert [spend(c, key).headers["X-RateLimit-Remaining"] for c in (a, b, a, b)] == ["3", "2", "1", "0"]
    assert spend(a, key).status_code == 429
    assert spend(b, key).status_code == 429
    assert b.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"] == "0"


def _start_redis(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not redis_available(f"redis://127.0.0.1:{port}/0"):
        time.sleep(0.05)
    return process


def test_redis_unreachable_fails_closed_and_recovers(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        missing_service("redis-server is not installed")
    port = free_port()
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}", redis_url=f"redis://127.0.0.1:{port}/0"))
    client = app.test_client()
    key, _ = new_key(app, per_minute=50)
    redis = _start_redis(port)
    try:
        assert spend(client, key).status_code == 400
        redis.terminate(), redis.wait()
        down = spend(client, key)
        assert down.status_code == 500
        assert down.get_json()["error"]["code"] == "INTERNAL_ERROR"
        assert "rate-limit store" in down.get_json()["error"]["message"]
        assert client.get("/verify", headers=bearer(key)).status_code == 500
        redis = _start_redis(port)
        recovered = spend(client, key)
        assert recovered.status_code == 400  # no restart needed; counters started afresh with the new Redis
        assert recovered.headers["X-RateLimit-Remaining"] == "49"
    finally:
        redis.terminate(), redis.wait()
        services_of(app).close()
