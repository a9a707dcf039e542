"""Inputs that once ended in a 500 answer a 4xx in the error envelope, on every POST and PATCH route, on SQLite and
on the real PostgreSQL.

The inputs, each sent to every route it applies to:

- a body nested far deeper than any parser walks (at the top and inside a field);
- a NUL character, and a lone surrogate (the JSON escape \\ud800 with no partner), appended to each string of a
  valid body in turn: PostgreSQL refuses NUL in text, and no driver can encode a lone surrogate;
- a NUL in the id of the URL path;
- a timestamp whose UTC offset carries it past 9999-12-31T23:59:59Z (9999-12-31T23:30:00-01:00), the last
  instant a datetime holds.

Every answer must be a 4xx with {"error": {"code", "message", "details"}}; the Azure-compatible routes answer in
Azure's own shape {"code", "message"} instead (docs/anomalies.md), the Nixtla-compatible ones Nixtla's {"detail"}
(docs/nixtla.md). A malformed chunked body needs a real server:
tests/e2e/test_fuzz_4xx_chunked.py sends it to the same routes. The dashboard's POST routes are HTML forms,
answered as pages, and are not part of this list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support import bearer, build_app, new_key, services_of, settings_for

pytestmark = pytest.mark.slow

CODES = {"UNAUTHORIZED", "INVALID_REQUEST", "DATA_VALIDATION_ERROR", "RATE_LIMIT_EXCEEDED", "INTERNAL_ERROR"}
AZURE_PREFIX = "/anomalydetector/"
NIXTLA_PREFIX = "/v2/"
PLAIN_KEY = re.compile(r"ak_[0-9a-f]{64}")
FULL = ("read", "write", "admin", "delete")
DEEP = 50_000
PAST_LAST_INSTANT = "9999-12-31T23:30:00-01:00"  # 10000-01-01T00:30:00Z
HOOK = "https://127.0.0.1:9/hook"  # private addresses are allowed below; nothing is ever sent to it


@dataclass
class Served:
    app: Flask
    client: FlaskClient
    key: str = field(repr=False)  # a failure report never shows a plain key
    monitor_id: str
    stored_timestamp: str

    def target_key(self) -> str:
        """A fresh key to change, rotate or revoke, so no case sees another's leftovers."""
        return new_key(self.app, ("read",))[1]


def daily(count: int) -> list[str]:
    return [f"2026-01-{day:02d}T00:00:00" for day in range(1, count + 1)]


def minutes_to_the_end(count: int) -> list[str]:
    """Minutes up to and past the last instant: in -01:00, 22:59 is 23:59Z and 23:00 is already year 10000."""
    return [f"9999-12-31T{22 + (50 + i) // 60}:{(50 + i) % 60:02d}:00-01:00" for i in range(count)]


@dataclass(frozen=True)
class Route:
    """One POST or PATCH route: a valid body (None: the route reads none), the path's arguments, and the body
    with timestamps past the last instant (None: no timestamp or date-time field)."""

    body: Callable[[Served], Any] | None
    path: Callable[[Served], dict[str, str]] = field(default=lambda served: {})
    past_last_instant: Callable[[Served], Any] | None = None


def forecast_body(timestamps: list[str], frequency: str) -> dict[str, Any]:
    return {"series": [{"timestamps": timestamps, "values": list(range(len(timestamps)))}], "forecast_horizon": 3,
            "data_frequency": frequency, "forecast_frequency": frequency}


def anomaly_body(timestamps: list[str], frequency: str) -> dict[str, Any]:
    return {"series": [{"timestamps": timestamps, "values": list(range(len(timestamps)))}],
            "data_frequency": frequency}


def nixtla_body(served: Served) -> dict[str, Any]:
    return {"series": {"y": list(range(24)), "sizes": [24], "start_datetime": ["2024-01-01T00:00:00"]},
            "freq": "MS", "h": 3, "level": [90], "n_windows": 2, "detection_size": 3, "model": "timegpt-2.1"}


def azure_body(served: Served) -> dict[str, Any]:
    return {"series": [{"timestamp": f"{t}Z", "value": i} for i, t in enumerate(daily(14))], "granularity": "daily"}


ROUTES: dict[tuple[str, str], Route] = {
    # A forecast steps the wall clock as written (docs/contract.md, section 7) and never turns a timestamp into UTC:
    # a series ending 9999-12-31T23:30:00-01:00 is valid there, so the last-instant input does not apply.
    ("POST", "/forecast"): Route(body=lambda s: forecast_body(daily(12), "Daily")),
    ("POST", "/anomalies"): Route(
        body=lambda s: anomaly_body(daily(14), "Daily"),
        past_last_instant=lambda s: anomaly_body(minutes_to_the_end(14), "Minutes"),
    ),
    ("POST", "/anomalies/last"): Route(
        body=lambda s: anomaly_body(daily(14), "Daily"),
        past_last_instant=lambda s: anomaly_body(minutes_to_the_end(14), "Minutes"),
    ),
    # Azure's timestamp reading is its own (app/compat/azure/schemas.py): it takes any ISO instant and stores nothing,
    # so the last-instant input does not apply there.
    ("POST", "/anomalydetector/v1.1/timeseries/entire/detect"): Route(body=azure_body),
    ("POST", "/anomalydetector/v1.1/timeseries/last/detect"): Route(body=azure_body),
    ("POST", "/anomalydetector/v1.1/timeseries/changepoint/detect"): Route(body=azure_body),
    # Nixtla's body carries each series' start and a frequency, never a timestamp per point; its own shape of error.
    **{("POST", f"/v2/{route}"): Route(body=nixtla_body)
       for route in ("forecast", "cross_validation", "anomaly_detection", "online_anomaly_detection")},
    ("POST", "/v2/<path:rest>"): Route(body=nixtla_body, path=lambda s: {"path:rest": "finetune"}),
    # A batch keeps its series for the workers: a string no database could keep as text is refused up front.
    ("POST", "/batches"): Route(body=lambda s: {**forecast_body(daily(12), "Daily"), "series": [
        {"id": "shop-1", **forecast_body(daily(12), "Daily")["series"][0]}]}),
    ("POST", "/keys"): Route(
        body=lambda s: {"name": "reporting", "permissions": ["read"], "tier": "free",
                        "expires_at": "2099-01-01T00:00:00Z"},
        past_last_instant=lambda s: {"name": "reporting", "permissions": ["read"], "expires_at": PAST_LAST_INSTANT},
    ),
    ("PATCH", "/keys/<key_id>"): Route(
        body=lambda s: {"name": "renamed", "tier": "free", "limits": {"per_minute": 5}},
        path=lambda s: {"key_id": s.target_key()},
    ),
    ("POST", "/keys/<key_id>/rotate"): Route(body=lambda s: {"grace_seconds": 0},
                                              path=lambda s: {"key_id": s.target_key()}),
    ("POST", "/keys/<key_id>/revoke"): Route(body=None, path=lambda s: {"key_id": s.target_key()}),
    ("POST", "/monitors"): Route(body=lambda s: {"name": "checkout", "data_frequency": "Hours", "webhook_url": HOOK}),
    ("PATCH", "/monitors/<monitor_id>"): Route(
        body=lambda s: {"name": "checkout latency", "webhook_url": HOOK},
        path=lambda s: {"monitor_id": s.monitor_id},
    ),
    ("POST", "/monitors/<monitor_id>/points"): Route(
        body=lambda s: {"timestamps": ["2026-02-01T00:00:00Z", "2026-02-01T01:00:00Z"], "values": [1.0, 2.0]},
        path=lambda s: {"monitor_id": s.monitor_id},
        past_last_instant=lambda s: {"timestamps": [PAST_LAST_INSTANT], "values": [1.0]},
    ),
    ("POST", "/monitors/<monitor_id>/feedback"): Route(
        body=lambda s: {"timestamp": s.stored_timestamp, "is_anomaly": False},
        path=lambda s: {"monitor_id": s.monitor_id},
        past_last_instant=lambda s: {"timestamp": PAST_LAST_INSTANT, "is_anomaly": False},
    ),
    ("POST", "/monitors/<monitor_id>/webhook-secret"): Route(body=None, path=lambda s: {"monitor_id": s.monitor_id}),
    ("POST", "/monitors/points"): Route(
        body=lambda s: {"points": [{"monitor_id": s.monitor_id, "timestamp": "2026-02-01T03:00:00Z", "value": 1.0}]},
        past_last_instant=lambda s: {"points": [{"monitor_id": s.monitor_id, "timestamp": PAST_LAST_INSTANT,
                                                 "value": 1.0}]},
    ),
    # Remote write bodies are snappy-compressed protobuf, not JSON: tests/api/monitors/intake/test_remote_write.py
    # sends it malformed ones and tests/api/web/test_fuzz.py generated bytes.
    ("POST", "/api/v1/write"): Route(body=None),
}


def string_leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every string in a body (the first element only of a list, whose others are alike)."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for name, inner in value.items():
            yield from string_leaves(inner, (*path, name))
    elif isinstance(value, list) and value:
        yield from string_leaves(value[0], (*path, 0))


def with_leaf(body: Any, path: tuple[Any, ...], change: Callable[[str], str]) -> Any:
    copy = json.loads(json.dumps(body))
    holder = copy
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = change(holder[path[-1]])
    return copy


# Stands in for the served app while the cases are listed: only the bodies' shapes are read then.
SAMPLE = Served(app=None, client=None, key="", monitor_id="mon_sample", stored_timestamp="2026-01-01T00:00:00Z")  # type: ignore[arg-type]

# (case id, how the case changes the valid request): each returns (path arguments to use, raw body or None).
Case = Callable[[Served, Route], tuple[dict[str, str], bytes | None]]


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()  # ensure_ascii: a lone surrogate goes out as the escape \ud800


def cases() -> Iterator[Any]:
    for (method, rule), route in ROUTES.items():
        def valid_body(served: Served, route: Route = route) -> bytes | None:
            return None if route.body is None else _json(route.body(served))

        if route.body is not None:
            yield pytest.param(method, rule, lambda s, r: (r.path(s), b"[" * DEEP + b"]" * DEEP),
                               id=f"{method} {rule} deep")
            yield pytest.param(method, rule,
                               lambda s, r: (r.path(s), b'{"name": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
                               id=f"{method} {rule} deep-in-a-field")
            for leaf in string_leaves(route.body(SAMPLE)):
                where = ".".join(map(str, leaf))
                for name, extra in (("nul", "\x00"), ("lone-surrogate", "\ud800")):
                    def change(served: Served, r: Route, leaf: tuple[Any, ...] = leaf, extra: str = extra) -> Any:
                        assert r.body is not None
                        return r.path(served), _json(with_leaf(r.body(served), leaf, lambda text: text + extra))

                    yield pytest.param(method, rule, change, id=f"{method} {rule} {name} in {where}")
        if "<" in rule:
            def nul_in_path(served: Served, r: Route, valid: Callable[..., bytes | None] = valid_body) -> Any:
                return {name: value[:4] + "\x00" + value[4:] for name, value in r.path(served).items()}, valid(served)

            yield pytest.param(method, rule, nul_in_path, id=f"{method} {rule} nul in the path")
        if route.past_last_instant is not None:
            yield pytest.param(method, rule,
                               lambda s, r: (r.path(s), _json(r.past_last_instant(s))),  # type: ignore[misc]
                               id=f"{method} {rule} past 9999-12-31 UTC")


@pytest.fixture(scope="module")
def served(module_database_url: str) -> Iterator[Served]:
    app = build_app(settings_for(module_database_url, allow_private_webhooks=True), start_workers=True)
    client = app.test_client()
    key, _ = new_key(app, FULL, per_minute=1_000_000, per_hour=1_000_000, per_day=1_000_000)
    monitor = client.post("/monitors", json={"name": "fuzzed", "data_frequency": "Hours"}, headers=bearer(key))
    assert monitor.status_code == 201, monitor.get_json()
    monitor_id = monitor.get_json()["id"]
    stamps = [f"2026-01-01T{hour:02d}:00:00Z" for hour in range(3)]
    pushed = client.post(f"/monitors/{monitor_id}/points", json={"timestamps": stamps, "values": [1.0, 2.0, 3.0]},
                         headers=bearer(key))
    assert pushed.status_code == 200, pushed.get_json()
    yield Served(app, client, key, monitor_id, stamps[-1])
    services_of(app).close()


def test_every_post_and_patch_route_is_fuzzed(served: Served) -> None:
    routes = {
        (method, rule.rule)
        for rule in served.app.url_map.iter_rules()
        if not rule.rule.startswith("/dashboard")
        for method in (rule.methods or set()) & {"POST", "PATCH"}
    }
    assert routes == set(ROUTES), "add the missing route to ROUTES (or drop the stale one)"


def url_of(rule: str, arguments: dict[str, str]) -> str:
    from urllib.parse import quote

    path = rule
    for name, value in arguments.items():
        path = path.replace(f"<{name}>", quote(value, safe=""))
    return path


@pytest.mark.parametrize(("method", "rule", "case"), list(cases()))
def test_the_answer_is_a_4xx_envelope(served: Served, method: str, rule: str, case: Case) -> None:
    arguments, raw = case(served, ROUTES[(method, rule)])
    response = served.client.open(url_of(rule, arguments), method=method, data=raw,
                                  headers={**bearer(served.key), "Content-Type": "application/json"})
    text = PLAIN_KEY.sub("ak_<redacted>", response.get_data(as_text=True))[:400]
    assert 400 <= response.status_code < 500, f"{response.status_code}: {text}"
    assert response.mimetype == "application/json", text
    body = response.get_json()
    if rule.startswith(AZURE_PREFIX):
        assert set(body) == {"code", "message"} and body["code"] and body["message"], text
        return
    if rule.startswith(NIXTLA_PREFIX):
        assert set(body) == {"detail", "code"} and body["code"] and body["detail"], text
        return
    assert set(body) == {"error"}, text
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, text
    assert error["code"] in CODES and error["message"] and isinstance(error["details"], dict), text
