"""The Prometheus reader's memory of a failing server is an account's own: one account's query that times out on a
shared Prometheus makes that account's other monitors on it wait their turn, never another account's healthy one
(which took the remembered timeout and was read again only a retry later)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.monitors.prometheus import reader as prometheus
from tests.support import build_app, new_key, services_of, settings_for

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}
SLOW = "slow_query"


class SharedPrometheus:
    """One Prometheus two accounts read: a query naming SLOW is held past the reader's timeout (a heavy query),
    any other is answered at once with a value at every step asked for."""

    def __init__(self) -> None:
        self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
                if SLOW in form["query"][0]:
                    shared.release.wait(30)
                    return
                start, end, step = (int(float(form[name][0])) for name in ("start", "end", "step"))
                values = [[moment, str(1.0 + moment % 7)] for moment in range(start, end + 1, step)]
                body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
                    {"metric": {"job": "api"}, "values": values}]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        shared = self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def reader_app(module_database_url: str) -> Iterator[Flask]:
    app = build_app(settings_for(module_database_url, allow_private_webhooks=True, prometheus_timeout_seconds=1.0))
    yield app
    app.extensions["monitors"].sender.stop()
    services_of(app).close()


def _headers(app: Flask, account: str) -> dict[str, str]:
    plain, _ = new_key(app, permissions=("read", "write"), account_id=account, **BIG_LIMITS)
    return {"Authorization": f"Bearer {plain}"}


def _create(client: FlaskClient, headers: dict[str, str], url: str, query: str) -> str:
    answer = client.post("/monitors", headers=headers, json={
        "name": query, "data_frequency": "Minutes", "prometheus_url": url, "prometheus_query": query})
    assert answer.status_code == 201, answer.json
    return str(answer.json["id"])


def test_one_accounts_slow_query_does_not_fail_another_accounts_monitor_on_the_same_server(
        reader_app: Flask) -> None:
    client = reader_app.test_client()
    slow_account, healthy_account = _headers(reader_app, "acct-slow"), _headers(reader_app, "acct-healthy")
    server = SharedPrometheus()
    slow = _create(client, slow_account, f"{server.url}/a", f"{SLOW}{{job='api'}}")
    slow_sibling = _create(client, slow_account, f"{server.url}/b", "up{job='api'}")
    healthy = _create(client, healthy_account, f"{server.url}/b", "up{job='api'}")
    reader = prometheus.Reader(dataclasses.replace(services_of(reader_app).settings))
    try:
        claimed = {m.id: m for m in reader.claim(datetime.now(UTC) + timedelta(seconds=1))}
        # One after the other, well within FAILURE_MEMORY_SECONDS: the slow query times out first.
        for monitor_id in (slow, healthy, slow_sibling):
            reader._safe_read(claimed[monitor_id])
    finally:
        reader.close()
        server.close()

    def source(headers: dict[str, str], monitor_id: str) -> dict[str, Any]:
        view = client.get(f"/monitors/{monitor_id}?points=1000", headers=headers).json
        return {**view["source"], "points": len(view["points"])}

    assert source(slow_account, slow)["status"] == "timeout"
    # The slow account's other monitor on that server takes the remembered failure without asking again ...
    assert source(slow_account, slow_sibling)["status"] == "timeout"
    # ... and the other account's monitor is read and judged as if nothing had happened.
    read = source(healthy_account, healthy)
    assert read["status"] == "ok" and read["points"] > 0, read
