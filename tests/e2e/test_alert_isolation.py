"""One account's dead receivers must not delay another account's alerts, on a real gunicorn server.

The issue: 40 monitors whose webhooks pointed at a server that accepts connections and never answers
delayed another account's anomaly alert by 59 s, because deliveries went out 8 at a time, each batch
waiting for its slowest member (a 10 s timeout), and retries were claimed before new events.
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from app.compute.detect.streaming import QUIET_ROWS
from app.monitors.alerts.sender import PER_DESTINATION
from app.monitors.alerts.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from tests.support import Server, Tarpit, bearer, cli_in_process, wait_for

pytestmark = pytest.mark.slow

TARPITS = 40
WARMUP_POINTS = 60
ALERT_WITHIN_SECONDS = 2.0


class Receiver:
    """A healthy receiver on 127.0.0.1: answers 204 at once and notes when each event arrived."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}  # monitor id -> secret, for the signature check
        self.arrivals: list[tuple[float, dict[str, Any], bool]] = []  # (monotonic time, event, signature ok)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                event = json.loads(body)
                signed = verify(receiver.secrets.get(event["monitor_id"], ""), int(self.headers[TIMESTAMP_HEADER]),
                                body, self.headers[SIGNATURE_HEADER])
                with receiver._lock:
                    receiver.arrivals.append((time.monotonic(), event, signed))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, name="receiver", daemon=True)
        self._thread.start()

    def arrival(self, index: int) -> tuple[float, dict[str, Any], bool] | None:
        with self._lock:
            return self.arrivals[index] if len(self.arrivals) > index else None

    def first_arrival(self) -> tuple[float, dict[str, Any], bool] | None:
        return self.arrival(0)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def create_key(env: dict[str, str], account: str) -> str:
    out = cli_in_process("keys", "create", "--permissions", "read,write,delete", "--account", account,
                         "--per-minute", "100000", "--per-hour", "1000000", "--per-day", "10000000", "--json",
                         env=env).stdout
    return json.loads(out)["key"]


def minute_series(count: int, start: int = 0) -> tuple[list[str], list[float]]:
    """A smooth one-per-minute series (the judge flags nothing in it) from minute ``start``."""
    minutes = range(start, start + count)
    stamps = [f"2026-01-01T{i // 60:02d}:{i % 60:02d}:00Z" for i in minutes]
    return stamps, [10 + 3 * math.sin(i / 15) + 0.2 * math.cos(i * 1.7) for i in minutes]


def warmed_monitor(session: requests.Session, server: Server, key: str, name: str, webhook_url: str) -> dict[str, Any]:
    """A monitor past its warm-up (so its next point is judged), whose points so far raised no event."""
    created = session.post(f"{server.url}/monitors", headers=bearer(key), timeout=10, json={
        "name": name, "data_frequency": "Minutes", "webhook_url": webhook_url})
    assert created.status_code == 201, created.text
    stamps, values = minute_series(WARMUP_POINTS)
    answer = session.post(f"{server.url}/monitors/{created.json()['id']}/points", headers=bearer(key), timeout=30,
                          json={"timestamps": stamps, "values": values})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["warmup_points"] < WARMUP_POINTS and not any(body["is_anomaly"]), body
    return created.json()


def append(session: requests.Session, server: Server, key: str, monitor_id: str, minute: int,
           lift: float) -> dict[str, Any]:
    """Appends the series' point at ``minute``, raised by ``lift``; its verdict."""
    stamps, values = minute_series(1, start=minute)
    answer = session.post(f"{server.url}/monitors/{monitor_id}/points", headers=bearer(key), timeout=30,
                          json={"timestamps": stamps, "values": [values[0] + lift]})
    assert answer.status_code == 200, answer.text
    return answer.json()


def spike(session: requests.Session, server: Server, key: str, monitor_id: str) -> None:
    """Appends one point far above the monitor's range: one `anomaly` event."""
    assert append(session, server, key, monitor_id, WARMUP_POINTS, 40)["is_anomaly"] == [True]


def timed_out_attempt(session: requests.Session, server: Server, key: str,
                      monitor_ids: list[str]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(delivery, attempt) of the first of these monitors whose delivery has a recorded failed attempt."""
    for monitor_id in monitor_ids:
        answer = session.get(f"{server.url}/monitors/{monitor_id}/deliveries", headers=bearer(key), timeout=10)
        assert answer.status_code == 200, answer.text
        for delivery in answer.json()["deliveries"]:
            if delivery["attempts"]:
                return delivery, delivery["attempts"][0]
    return None


def test_dead_receivers_of_one_account_do_not_delay_another_accounts_alert(tmp_path: Path) -> None:
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'isolation.sqlite3'}",
        "ALLOW_PRIVATE_WEBHOOKS": "1",
        "FORECAST_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
    }
    cli_in_process("db", "upgrade", env=env)
    key_a, key_b = create_key(env, "acct-tarpits"), create_key(env, "acct-healthy")
    tarpit = Tarpit()
    receiver = Receiver()
    server = Server(env, log_path=tmp_path / "server.log")
    try:
        server.wait_ready()
        with requests.Session() as session:
            # Account A: every monitor alerts a receiver that never answers (the default 10 s timeout).
            dead = [warmed_monitor(session, server, key_a, f"dead-{i}", f"{tarpit.url}/hook")["id"]
                    for i in range(TARPITS)]
            healthy = warmed_monitor(session, server, key_b, "healthy", receiver.url)
            receiver.secrets[healthy["id"]] = healthy["webhook_secret"]
            for monitor_id in dead:
                spike(session, server, key_a, monitor_id)
            wait_for(lambda: tarpit.accepted >= PER_DESTINATION, 10, "the tarpit to hold deliveries")

            # Every tarpit event is new and due before this one; the healthy receiver must not wait for them.
            started = time.monotonic()
            spike(session, server, key_b, healthy["id"])
            # Waits past the limit (bounded) so that a failure says how late the alert was.
            arrived_at, event, signed = wait_for(receiver.first_arrival, 15, "the healthy receiver's alert",
                                                 interval=0.02)
            took = arrived_at - started
            assert took <= ALERT_WITHIN_SECONDS, f"the healthy receiver's alert took {took:.1f} s"
            assert event["monitor_id"] == healthy["id"] and event["type"] == "anomaly" and signed

            # The tarpit's first deliveries end at the attempt's timeout (10 s by default) and are retried later.
            delivery, attempt = wait_for(lambda: timed_out_attempt(session, server, key_a, dead), 30,
                                         "a tarpit delivery to time out")
            assert attempt["status_code"] is None and (attempt["error"] or "").startswith("TimeoutError"), attempt
            assert 9_000 <= attempt["duration_ms"] <= 12_000, attempt
            assert delivery["status"] in ("pending", "sending"), delivery

            # Now retries and the rest of the tarpit's new events compete for the sender: still no wait.
            started = time.monotonic()
            # Normal points until the detector's incident is over: its `anomaly_ended` event (sequence 2).
            stamps, values = minute_series(QUIET_ROWS, start=WARMUP_POINTS + 1)
            answer = session.post(f"{server.url}/monitors/{healthy['id']}/points", headers=bearer(key_b), timeout=30,
                                  json={"timestamps": stamps, "values": values})
            assert answer.status_code == 200 and not any(answer.json()["is_anomaly"]), answer.text
            arrived_at, event, signed = wait_for(lambda: receiver.arrival(1), 15, "the healthy receiver's second "
                                                 "alert", interval=0.02)
            took = arrived_at - started
            assert took <= ALERT_WITHIN_SECONDS, f"the healthy receiver's second alert took {took:.1f} s"
            assert event["monitor_id"] == healthy["id"] and event["sequence"] == 2 and signed
        # One dead destination holds at most its own few slots, never the sender's whole pool.
        assert tarpit.most_open <= PER_DESTINATION, f"{tarpit.most_open} deliveries open on one dead receiver"
    finally:
        tarpit.stop()  # first: the deliveries it holds fail at once, so the server stops without waiting them out
        server.stop()
        receiver.stop()
