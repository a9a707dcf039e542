"""Prometheus-backed monitors, Alertmanager targets and GET /monitors/metrics in-process, on SQLite and on the
real PostgreSQL: the checks on the new fields, the exposition, the Alertmanager events in the shared queue, the
poller's claims and lease, and a read that meets a closed port. Reading a real Prometheus is
tests/e2e/test_prometheus.py."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Row, select

from app.compute.detect.streaming import QUIET_ROWS
from app.monitors.alerts import alertmanager
from app.monitors.prometheus import poller, promql
from app.monitors.prometheus import reader as prometheus
from app.monitors.records import monitor_events_table, monitor_series_table, monitors_table
from tests.support import build_app, minute_series, new_key, services_of, settings_for, wait_for

BIG_LIMITS = {"per_minute": 1_000_000, "per_hour": 10_000_000, "per_day": 100_000_000}


@pytest.fixture(scope="module")
def prom_app(module_database_url: str) -> Iterator[Flask]:
    app = build_app(settings_for(module_database_url, allow_private_webhooks=True, prometheus_timeout_seconds=2.0))
    yield app
    app.extensions["monitors"].sender.stop()
    services_of(app).close()


@pytest.fixture(scope="module")
def keys(prom_app: Flask) -> dict[str, dict[str, str]]:
    def key(permissions: tuple[str, ...], account: str = "acct-a") -> dict[str, str]:
        plain, _ = new_key(prom_app, permissions=permissions, account_id=account, **BIG_LIMITS)
        return {"Authorization": f"Bearer {plain}"}

    return {"owner": key(("read", "write", "delete")), "admin": key(("read", "admin")),
            "other_admin": key(("read", "write", "admin"), account="acct-b")}


@pytest.fixture
def client(prom_app: Flask) -> FlaskClient:
    return prom_app.test_client()


def closed_port_url() -> str:
    """A loopback port bound by nobody listening: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def create(client: FlaskClient, headers: dict[str, str], **fields: Any) -> Any:
    return client.post("/monitors", json={"name": "cpu", "data_frequency": "Minutes", **fields}, headers=headers)


@pytest.mark.parametrize(("fields", "field", "issue"), [
    ({"prometheus_query": "up"}, "prometheus_url", "go together"),
    ({"prometheus_url": "http://127.0.0.1:9090"}, "prometheus_query", "go together"),
    ({"prometheus_url": "http://127.0.0.1:9090", "prometheus_query": "  "}, "prometheus_query", "blank"),
    ({"prometheus_url": "http://127.0.0.1:9090", "prometheus_query": "x" * 5000}, "prometheus_query", "at most"),
    ({"prometheus_url": "http://127.0.0.1:9090", "prometheus_query": "up", "data_frequency": "Monthly"},
     "data_frequency", "Prometheus-backed"),
    ({"prometheus_url": "ftp://127.0.0.1:9090", "prometheus_query": "up"}, "prometheus_url", "https"),
    ({"prometheus_url": "http://127.0.0.1:9090/?a=1", "prometheus_query": "up"}, "prometheus_url", "base URL"),
    ({"alertmanager_url": "http://user:pw@127.0.0.1:9093"}, "alertmanager_url", "credentials"),
    ({"prometheus_url": "http://127.0.0.1:9090", "prometheus_query": 5}, "prometheus_query", "string"),
])
def test_bad_sources_are_400_and_create_nothing(client: FlaskClient, keys: dict, fields: dict[str, Any], field: str,
                                               issue: str) -> None:
    before = client.get("/monitors", headers=keys["owner"]).json["monitors"]
    answer = create(client, keys["owner"], **fields)
    assert answer.status_code == 400, answer.json
    assert answer.json["error"]["details"]["field"] == field
    assert issue.lower() in answer.json["error"]["details"]["issue"].lower(), answer.json
    assert client.get("/monitors", headers=keys["owner"]).json["monitors"] == before


def test_private_prometheus_is_refused_without_the_allowance(module_database_url: str) -> None:
    app = build_app(settings_for(module_database_url))
    try:
        plain, _ = new_key(app, permissions=("read", "write"), account_id="acct-private", **BIG_LIMITS)
        answer = create(app.test_client(), {"Authorization": f"Bearer {plain}"},
                        prometheus_url="http://127.0.0.1:9090", prometheus_query="up")
        assert answer.status_code == 400
        assert "ALLOW_PRIVATE_WEBHOOKS" in answer.json["error"]["details"]["issue"]
    finally:
        services_of(app).close()


def test_a_prometheus_monitor_shows_its_source_takes_no_pushed_points_and_keeps_its_kind(
        client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    created = create(client, owner, prometheus_url="http://127.0.0.1:9090", prometheus_query="sum(rate(x[5m]))")
    assert created.status_code == 201, created.json
    source = created.json["source"]
    assert source["kind"] == "prometheus" and source["status"] == "pending" and source["step_seconds"] == 60
    monitor_id = created.json["id"]
    stamps, values = minute_series(3)
    pushed = client.post(f"/monitors/{monitor_id}/points", json={"timestamps": stamps, "values": values},
                         headers=owner)
    assert pushed.status_code == 400 and pushed.json["error"]["details"]["field"] == "monitor_id"
    assert client.get(f"/monitors/{monitor_id}", headers=owner).json["point_count"] == 0

    changed = client.patch(f"/monitors/{monitor_id}", json={"prometheus_query": "sum(rate(y[5m]))"}, headers=owner)
    assert changed.status_code == 200 and changed.json["source"]["query"] == "sum(rate(y[5m]))"
    dropped = client.patch(f"/monitors/{monitor_id}", json={"prometheus_query": None, "prometheus_url": None},
                           headers=owner)
    assert dropped.status_code == 400 and "fixed at creation" in dropped.json["error"]["details"]["issue"]

    plain = create(client, owner)
    assert plain.json["source"] == {"kind": "push"} and plain.json["alertmanager_url"] is None
    to_reader = client.patch(f"/monitors/{plain.json['id']}", headers=owner,
                             json={"prometheus_query": "up", "prometheus_url": "http://127.0.0.1:9090"})
    assert to_reader.status_code == 400


def test_metrics_need_admin_and_show_only_the_accounts_monitors(client: FlaskClient, keys: dict) -> None:
    owner = keys["owner"]
    named = create(client, owner, name='disk "root"\\ \nusage').json
    stamps, values = minute_series(40)
    values[-1] += 50
    answer = client.post(f"/monitors/{named['id']}/points", json={"timestamps": stamps, "values": values},
                         headers=owner)
    assert answer.status_code == 200 and answer.json["is_anomaly"][-1]
    assert client.get("/monitors/metrics", headers=owner).status_code == 403
    exposed = client.get("/monitors/metrics", headers=keys["admin"])
    assert exposed.status_code == 200 and exposed.mimetype == "text/plain"
    labels = f'monitor_id="{named["id"]}",monitor_name="disk \\"root\\"\\\\ \\nusage"'
    text = exposed.get_data(as_text=True)
    last = answer.json
    assert f"forecast_monitor_value{{{labels}}} {values[-1]!r}" in text
    assert f"forecast_monitor_anomalous{{{labels}}} 1" in text
    assert f"forecast_monitor_upper_bound{{{labels}}} {last['upper_bound'][-1]!r}" in text
    assert f"forecast_monitor_lower_bound{{{labels}}} {last['lower_bound'][-1]!r}" in text
    assert f"forecast_monitor_expected{{{labels}}} {last['expected'][-1]!r}" in text
    score = last["anomaly_score"][-1]  # the exposition writes whole numbers without ".0" (a score of 1)
    assert f"forecast_monitor_anomaly_score{{{labels}}} {int(score) if score.is_integer() else repr(score)}" in text
    # One series per monitor per gauge: every sample line of a gauge names a distinct monitor.
    for gauge, _, _ in prometheus_gauges():
        ids = [line.split('monitor_id="', 1)[1].split('"', 1)[0] for line in text.splitlines()
               if line.startswith(gauge + "{")]
        assert len(ids) == len(set(ids))
    assert named["id"] not in client.get("/monitors/metrics", headers=keys["other_admin"]).get_data(as_text=True)


def prometheus_gauges() -> tuple[tuple[str, str, str], ...]:
    from app.monitors.payloads.exposition import GAUGES

    return GAUGES


# A spike at point 45 opens an incident; the detector ends it after QUIET_ROWS normal points in a row, at this point.
INCIDENT_END = 45 + QUIET_ROWS


def spiky_run(client: FlaskClient, headers: dict[str, str], monitor_id: str) -> Any:
    stamps, values = minute_series(INCIDENT_END + 10)
    values[45] += 60  # opens an incident at 45; 46 is normal again, and INCIDENT_END closes it
    return client.post(f"/monitors/{monitor_id}/points", json={"timestamps": stamps, "values": values},
                       headers=headers)


def test_alertmanager_events_fire_and_resolve_in_the_shared_queue(client: FlaskClient, keys: dict,
                                                                   prom_app: Flask) -> None:
    owner = keys["owner"]
    target = closed_port_url()
    created = create(client, owner, alertmanager_url=target, webhook_url=closed_port_url() + "/hook").json
    answer = spiky_run(client, owner, created["id"])
    assert answer.status_code == 200 and answer.json["is_anomaly"][45] and not answer.json["is_anomaly"][46]
    with services_of(prom_app).database.transaction() as connection:
        events = list(connection.execute(select(monitor_events_table).where(
            monitor_events_table.c.monitor_id == created["id"]).order_by(monitor_events_table.c.seq)))
    kinds = [(e.destination, e.kind) for e in events]
    assert kinds == [("alertmanager", "firing"), ("webhook", "anomaly"), ("webhook", "anomaly_ended"),
                     ("alertmanager", "resolved")]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    firing, resolved = json.loads(events[0].payload), json.loads(events[3].payload)
    assert firing["alert"]["labels"] == {"alertname": "MonitorAnomaly", "monitor_id": created["id"],
                                         "monitor_name": "cpu"}
    assert resolved["alert"]["labels"] == firing["alert"]["labels"]
    assert firing["alert"]["startsAt"] == "2026-01-01T00:45:00Z" == resolved["alert"]["startsAt"]
    ends = minute_series(1, start=INCIDENT_END)[0][0]
    assert resolved["alert"]["endsAt"] == ends and "endsAt" not in firing["alert"]
    # The resolved alert describes the incident's first point, as the firing one did, not the normal one closing it.
    assert resolved["alert"]["annotations"] == firing["alert"]["annotations"]

    # As sent: a list of one alert; a firing one ends HOLD_SECONDS after the send, links are absolute.
    now = datetime(2026, 1, 1, 1, 0, tzinfo=UTC).timestamp()
    body = json.loads(alertmanager.render(events[0].payload.encode(), public_url="https://f.example/", now=now))
    assert body[0]["endsAt"] == "2026-01-01T01:05:00Z"
    assert body[0]["annotations"]["monitor"] == f"https://f.example/monitors/{created['id']}"
    assert body[0]["generatorURL"].startswith("https://f.example/dashboard/monitors#")
    assert "expected" in body[0]["annotations"]["summary"]
    assert body[0]["annotations"]["reason"] and body[0]["annotations"]["reason"] in body[0]["annotations"]["summary"]
    sent = json.loads(alertmanager.render(events[3].payload.encode(), public_url=None, now=now))
    assert sent[0]["endsAt"] == ends and sent[0]["annotations"]["monitor"].startswith("/monitors/")

    log = client.get(f"/monitors/{created['id']}/deliveries", headers=owner).json["deliveries"]
    assert {d["destination"] for d in log} == {"alertmanager", "webhook"}


def test_open_alerts_are_resent_once_per_interval_and_only_while_open(client: FlaskClient, keys: dict,
                                                                      prom_app: Flask) -> None:
    owner = keys["owner"]
    database = services_of(prom_app).database
    created = create(client, owner, alertmanager_url=closed_port_url()).json
    stamps, values = minute_series(46)
    values[45] += 60  # the run opens on the last point and stays open
    assert client.post(f"/monitors/{created['id']}/points", json={"timestamps": stamps, "values": values},
                       headers=owner).json["is_anomaly"][-1]

    def events() -> list[Row[Any]]:
        with database.transaction() as connection:
            return list(connection.execute(select(monitor_events_table).where(
                monitor_events_table.c.monitor_id == created["id"]).order_by(monitor_events_table.c.seq)))

    def revision() -> int:
        with database.transaction() as connection:
            return connection.execute(select(monitor_series_table.c.revision).where(
                monitor_series_table.c.monitor_id == created["id"])).scalar_one()

    now = datetime.now(UTC)
    before = revision()
    alertmanager.refresh_alerts(database, now=now)
    alertmanager.refresh_alerts(database, now=now + timedelta(seconds=10))  # too soon: nothing more
    assert [e.kind for e in events()] == ["firing", "firing"] and revision() == before + 1
    resent = json.loads(events()[-1].payload)["alert"]
    assert resent["startsAt"] == "2026-01-01T00:45:00Z" and "summary" in resent["annotations"]
    alertmanager.refresh_alerts(database, now=now + timedelta(seconds=alertmanager.RESEND_SECONDS))
    assert len(events()) == 3

    # The next points append after the re-sends (their sequence numbers never collide) and close the incident.
    more, more_values = minute_series(INCIDENT_END + 2)
    answer = client.post(f"/monitors/{created['id']}/points", json={"timestamps": more[46:],
                                                                      "values": more_values[46:]}, headers=owner)
    assert answer.status_code == 200 and not answer.json["is_anomaly"][0]
    assert [e.kind for e in events()] == ["firing", "firing", "firing", "resolved"]
    alertmanager.refresh_alerts(database, now=now + timedelta(seconds=10 * alertmanager.RESEND_SECONDS))
    assert len(events()) == 4


def test_a_read_that_cannot_connect_is_a_visible_state_and_is_retried(client: FlaskClient, keys: dict,
                                                                      prom_app: Flask) -> None:
    owner = keys["owner"]
    settings = services_of(prom_app).settings
    created = create(client, owner, prometheus_url=closed_port_url(), prometheus_query="up").json
    reader = prometheus.Reader(settings)
    try:
        claimed = [m for m in reader.claim(datetime.now(UTC) + timedelta(seconds=1)) if m.id == created["id"]]
        assert len(claimed) == 1
        # Claimed: a second poller finds nothing of it until the claim's lease runs out.
        assert created["id"] not in [m.id for m in reader.claim(datetime.now(UTC) + timedelta(seconds=2))]
        later = datetime.now(UTC) + timedelta(seconds=prometheus.CLAIM_LEASE_SECONDS + 5)
        again = [m for m in reader.claim(later) if m.id == created["id"]]
        assert len(again) == 1 and again[0].claim != claimed[0].claim
        # The first claim's holder comes back late: its outcome is not recorded over the new holder's.
        reader.read(claimed[0])
        assert client.get(f"/monitors/{created['id']}", headers=owner).json["source"]["status"] == "pending"
        reader.read(again[0])
    finally:
        reader.close()
    source = client.get(f"/monitors/{created['id']}", headers=owner).json["source"]
    assert source["status"] == "unreachable" and "Prometheus is unreachable" in source["message"]
    assert source["read_until"] is None and source["checked_at"] is not None


def test_one_poller_holds_the_lease_until_it_runs_out(prom_app: Flask) -> None:
    database = services_of(prom_app).database
    now = datetime.now(UTC) + timedelta(hours=1)  # after any lease an earlier test left
    assert poller.take_lease(database, holder="a", now=now)
    assert not poller.take_lease(database, holder="b", now=now + timedelta(seconds=1))
    assert poller.take_lease(database, holder="a", now=now + timedelta(seconds=1), renew=True)
    assert not poller.take_lease(database, holder="b", now=now + timedelta(seconds=2), renew=True)
    expired = now + timedelta(seconds=1 + poller.POLLER_LEASE_SECONDS + 1)
    assert poller.take_lease(database, holder="b", now=expired)
    assert not poller.take_lease(database, holder="a", now=expired, renew=True)


def test_reading_windows_are_aligned_bounded_and_start_where_the_last_read_stopped() -> None:
    def claimed(**fields: Any) -> promql.Claimed:
        base = {"id": "m", "account_id": "a", "data_frequency": "Minutes", "retention_points": 10_000,
                "prometheus_url": "http://p", "prometheus_query": "up", "series_count": 0, "read_until": None}
        return promql.Claimed(**{**base, **fields})

    now = 1_800_000_030.5  # 30.5 s into a minute
    first = promql.window(claimed(), now)
    assert first is not None and first.end == 1_800_000_000 and first.step == 60
    assert (first.end - first.start) // 60 + 1 == 1000 and not first.catching_up
    small = promql.window(claimed(retention_points=20), now)
    assert small is not None and (small.end - small.start) // 60 + 1 == 20
    assert promql.window(claimed(read_until=1_800_000_000), now) is None  # the next step is not readable yet
    behind = promql.window(claimed(read_until=1_800_000_000 - 5000 * 60), now)
    assert behind is not None and behind.start == 1_800_000_000 - 4999 * 60 and behind.catching_up
    assert (behind.end - behind.start) // 60 + 1 == promql.CHUNK_POINTS
    # The more series a monitor follows, the fewer steps one read asks for: at most CHUNK_SAMPLES samples.
    fleet = promql.window(claimed(read_until=1_800_000_000 - 5000 * 60, series_count=5000), now)
    assert fleet is not None and (fleet.end - fleet.start) // 60 + 1 == promql.CHUNK_SAMPLES // 5000
    huge = promql.window(claimed(read_until=1_800_000_000 - 5000 * 60, series_count=10**7), now)
    assert huge is not None and huge.start == huge.end
    # A step is read SETTLE_SECONDS after its time, not before.
    assert promql.window(claimed(read_until=1_800_000_000), 1_800_000_060 + 0.5) is None
    assert promql.window(claimed(read_until=1_800_000_000), 1_800_000_061.5) is not None
    assert math.isclose(promql.SETTLE_SECONDS, 1.0)


def test_the_dashboard_shows_the_source_its_state_and_the_alertmanager(prom_app: Flask) -> None:
    import re

    plain, _ = new_key(prom_app, permissions=("read", "write", "admin"), account_id="acct-dash", **BIG_LIMITS)
    client = prom_app.test_client()
    headers = {"Authorization": f"Bearer {plain}"}
    reader = create(client, headers, name="queue depth", prometheus_url=closed_port_url(),
                    prometheus_query='sum(queue_depth{queue="orders"})', alertmanager_url=closed_port_url()).json
    create(client, headers, name="pushed one")
    page = client.get("/dashboard/sign-in").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token is not None
    assert client.post("/dashboard/sign-in", data={"csrf_token": token.group(1), "api_key": plain}).status_code == 302
    settings = services_of(prom_app).settings
    worker = prometheus.Reader(settings)
    try:
        for claimed in worker.claim(datetime.now(UTC) + timedelta(seconds=1)):
            if claimed.id == reader["id"]:
                worker.read(claimed)
    finally:
        worker.close()
    html = client.get("/dashboard/monitors").get_data(as_text=True)
    assert "Reads Prometheus" in html and "sum(queue_depth{queue=&#34;orders&#34;})" in html
    assert "source-problem" in html and "unreachable" in html and "Prometheus is unreachable" in html
    assert "Alerts also go to the Alertmanager" in html
    assert "Points sent with" in html


def test_a_stalled_prometheus_holds_a_few_readers_not_one_per_monitor(client: FlaskClient, keys: dict,
                                                                        prom_app: Flask) -> None:
    import threading

    owner = keys["owner"]
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def hold() -> None:  # accepts and never answers: every read waits out its whole timeout
        listener.settimeout(0.2)
        while True:
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    threading.Thread(target=hold, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monitors = [create(client, owner, name=f"stalled {i}", prometheus_url=url, prometheus_query=f"up{{i='{i}'}}").json
                for i in range(3 * prometheus.READ_CONCURRENCY)]
    reader = prometheus.Reader(services_of(prom_app).settings)
    executor = prometheus.ThreadPoolExecutor(prometheus.READ_CONCURRENCY)
    try:
        reader.round(executor)
    finally:
        executor.shutdown()
        reader.close()
        listener.close()
        for connection in held:
            connection.close()
    # The first wave waited out the timeout; the monitors after it took that outcome without a request.
    assert 1 <= len(held) <= prometheus.READ_CONCURRENCY
    for monitor in monitors:
        source = client.get(f"/monitors/{monitor['id']}", headers=owner).json["source"]
        assert source["status"] == "timeout" and "did not answer within 2 s" in source["message"], source


class _Hanging:
    """A server that accepts connections and never answers: every read of it waits out its whole timeout."""

    def __init__(self) -> None:
        import threading

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._hold, daemon=True).start()

    def _hold(self) -> None:
        self.listener.settimeout(0.2)
        while True:
            try:
                self.held.append(self.listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


def test_monitors_on_other_paths_of_a_hanging_server_share_its_failure(client: FlaskClient, keys: dict,
                                                                        prom_app: Flask) -> None:
    owner = keys["owner"]
    server = _Hanging()
    monitors = [create(client, owner, name=f"path {i}", prometheus_url=f"{server.url}/tenant-{i}",
                       prometheus_query="up").json for i in range(2 * prometheus.READ_CONCURRENCY)]
    reader = prometheus.Reader(services_of(prom_app).settings)
    executor = prometheus.ThreadPoolExecutor(prometheus.READ_CONCURRENCY)
    try:
        reader.round(executor)
    finally:
        executor.shutdown()
        reader.close()
        server.close()
    # One server, whatever the paths: the first readers waited out the timeout, the others took their outcome.
    assert 1 <= len(server.held) <= prometheus.ACCOUNT_READERS
    for monitor in monitors:
        assert client.get(f"/monitors/{monitor['id']}", headers=owner).json["source"]["status"] == "timeout"


def test_one_accounts_hanging_sources_hold_a_share_of_the_readers_and_the_round_stays_short(
        client: FlaskClient, keys: dict, prom_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """150 monitors of one account on servers that never answer kept a round (and so the poller's lease, and both
    job processes) busy for minutes: another account's monitor was read late, batches waited. A round starts no
    read after ROUND_SECONDS and one account holds ACCOUNT_READERS readers at most."""
    monkeypatch.setattr(prometheus, "ROUND_SECONDS", 0.5)
    owner, other = keys["owner"], keys["other_admin"]
    servers = [_Hanging() for _ in range(6)]
    hanging = [create(client, owner, name=f"hang {i}", prometheus_url=server.url, prometheus_query="up").json
               for i, server in enumerate(servers)]
    healthy = create(client, other, name="elsewhere", prometheus_url=closed_port_url(), prometheus_query="up").json
    reader = prometheus.Reader(services_of(prom_app).settings)
    executor = prometheus.ThreadPoolExecutor(prometheus.READ_CONCURRENCY)
    try:
        read = reader.round(executor)
    finally:
        executor.shutdown()
        reader.close()
        for server in servers:
            server.close()
    # The other account's monitor was read in the first wave, beside the hanging account's two readers.
    assert client.get(f"/monitors/{healthy['id']}", headers=other).json["source"]["status"] == "unreachable"
    assert read == prometheus.ACCOUNT_READERS + 1
    statuses = [client.get(f"/monitors/{m['id']}", headers=owner).json["source"]["status"] for m in hanging]
    assert statuses.count("timeout") == prometheus.ACCOUNT_READERS
    # Those not started were handed back, unclaimed and due, for the next round (or another poller) to take.
    monitors = monitors_table.c
    with services_of(prom_app).database.transaction() as connection:
        rows = connection.execute(select(monitors.source_claim, monitors.source_due_at, monitors.source_checked_at)
                                  .where(monitors.id.in_([m["id"] for m in hanging]))).all()
    unread = [(claim, due) for claim, due, checked in rows if checked is None]
    assert len(unread) == len(hanging) - prometheus.ACCOUNT_READERS
    assert all(claim is None and due.replace(tzinfo=UTC) <= datetime.now(UTC) for claim, due in unread)


def test_a_monitor_due_while_a_read_hangs_is_read_without_waiting_for_it(
        client: FlaskClient, keys: dict, prom_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round read what it had claimed and claimed again only when all of it was done: a monitor falling due
    while one source hung waited out that read's whole timeout (another account's monitor read 11 s late). Now a
    free reader claims it at once; the hanging read is still under way when it is recorded."""
    monkeypatch.setattr(prometheus, "ROUND_SECONDS", 3.0)
    owner, other = keys["owner"], keys["other_admin"]
    server = _Hanging()
    hanging = create(client, owner, name="hangs", prometheus_url=server.url, prometheus_query="up").json
    reader = prometheus.Reader(dataclasses.replace(services_of(prom_app).settings, prometheus_timeout_seconds=8.0))
    executor = prometheus.ThreadPoolExecutor(prometheus.READ_CONCURRENCY)
    round_thread = prometheus.ThreadPoolExecutor(1)

    def status(headers: dict[str, str], monitor_id: str) -> str | None:
        return client.get(f"/monitors/{monitor_id}", headers=headers).json["source"]["status"]

    try:
        rounds = round_thread.submit(reader.round, executor)
        wait_for(lambda: server.held, 10, "the hanging server to hold the read")
        late = create(client, other, name="falls due meanwhile", prometheus_url=closed_port_url(),
                      prometheus_query="up").json
        wait_for(lambda: status(other, late["id"]) == "unreachable", 10, "the monitor due meanwhile to be read")
        assert status(owner, hanging["id"]) != "timeout"  # the hanging read has not ended yet
        assert rounds.result(timeout=30) >= 2
        assert status(owner, hanging["id"]) == "timeout"
    finally:
        round_thread.shutdown()
        executor.shutdown()
        reader.close()
        server.close()


class _Answering:
    """A stand-in Prometheus that answers every query_range with one fixed body (real Prometheus never answers
    malformed documents; this is the hostile server a monitor may point at)."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _matrix(values: list[Any]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                      "result": [{"metric": {}, "values": values}]}}).encode()


def _read_once(prom_app: Flask, client: FlaskClient, owner: dict[str, str], body: bytes, status: int = 200,
               **settings: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    server = _Answering(body, status)
    created = create(client, owner, name="hostile", prometheus_url=server.url, prometheus_query="up").json
    reader = prometheus.Reader(dataclasses.replace(services_of(prom_app).settings, **settings))
    try:
        claimed = [m for m in reader.claim(datetime.now(UTC) + timedelta(seconds=1)) if m.id == created["id"]]
        reader._safe_read(claimed[0])
    finally:
        reader.close()
        server.close()
    view = client.get(f"/monitors/{created['id']}?points=1000", headers=owner).json
    return {**view["source"], "monitor": view}, view["points"]


def _now_steps(count: int) -> list[int]:
    latest = (int(datetime.now(UTC).timestamp()) - 2) // 60 * 60
    return [latest - 60 * i for i in reversed(range(count))]


@pytest.mark.parametrize("body", [
    b"[" * 200_000 + b"]" * 200_000,  # nested deeper than the parser goes
    _matrix([[1, [1]]]),  # a value that is not a number
    _matrix("not a list"),  # type: ignore[arg-type]
    json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [5, 6]}}).encode(),
    json.dumps({"status": "error", "errorType": "bad_data", "error": "bad\u0000query" + "x" * 100_000}).encode(),
])
def test_a_malformed_prometheus_answer_is_a_visible_error_never_a_stuck_monitor(
        client: FlaskClient, keys: dict, prom_app: Flask, body: bytes) -> None:
    source, points = _read_once(prom_app, client, keys["owner"], body)
    assert source["status"] in {"error", "ok"}, source
    assert "\x00" not in source["message"] and len(source["message"]) <= prometheus.MESSAGE_CHARS
    assert points == []


def test_a_query_of_several_series_reads_each_as_a_series_within_the_cap(client: FlaskClient, keys: dict,
                                                                         prom_app: Flask) -> None:
    steps = _now_steps(15)
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"queue": name}, "values": [[stamp, str(10 + i % 3)] for i, stamp in enumerate(steps)]}
        for name in ("b", "d", "a")] + [
        {"metric": {"queue": "c", "blob": "x" * 5000}, "values": [[steps[0], "1"]]},  # labels too large
        {"metric": {"queue": "e"}, "values": [[steps[0], "NaN"]]},  # nothing readable: no series made
    ]}}).encode()
    source, points = _read_once(prom_app, client, keys["owner"], body, max_series_per_monitor=2)
    monitor = source["monitor"]
    assert source["status"] == "ok" and "5 series" in source["message"], source
    assert "1 series were not read" in source["message"] and "MAX_SERIES_PER_MONITOR" in source["message"]
    assert "1 series were skipped: their labels are too large" in source["message"]
    assert monitor["series_count"] == 2 and points == []  # several series: each has its own points
    assert sorted(s["labels"]["queue"] for s in monitor["series"]) == ["a", "b"]  # the first label sets, in order
    assert all(s["point_count"] == 15 for s in monitor["series"])
    assert monitor["series_refused"] == 15 and monitor["series_refused_at"]


def test_samples_off_the_steps_outside_the_window_or_unreadable_are_skipped(client: FlaskClient, keys: dict,
                                                                            prom_app: Flask) -> None:
    good = _now_steps(20)
    values = [[stamp, str(float(i % 5))] for i, stamp in enumerate(good)]
    values += [["1e400", "1"], [good[-1] + 30, "1"], [4102444800, "1"], [253402300800 * 2, "1"], [good[0], "NaN"],
               [True, "1"], [good[3], None]]
    source, points = _read_once(prom_app, client, keys["owner"], _matrix(values))
    assert source["status"] == "ok", source
    assert "7 samples were skipped" in source["message"]
    stamps = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() for p in points]
    assert stamps == [float(e) for e in good]


def test_an_account_keeps_at_most_its_monitor_limit(module_database_url: str) -> None:
    app = build_app(settings_for(module_database_url, max_monitors_per_account=2))
    try:
        plain, _ = new_key(app, permissions=("read", "write"), account_id="acct-limit", **BIG_LIMITS)
        headers = {"Authorization": f"Bearer {plain}"}
        client = app.test_client()
        assert [create(client, headers).status_code for _ in range(2)] == [201, 201]
        refused = create(client, headers)
        assert refused.status_code == 429, refused.json
        assert refused.json["error"]["details"] == {"limit": 2, "window": "monitors", "stored": 2}
        assert "MAX_MONITORS_PER_ACCOUNT" in refused.json["error"]["message"]
        assert len(client.get("/monitors", headers=headers).json["monitors"]) == 2
    finally:
        services_of(app).close()


def test_a_resolved_alert_describes_the_first_point_of_an_incident_opened_by_an_earlier_append(
        client: FlaskClient, keys: dict, prom_app: Flask) -> None:
    owner = keys["owner"]
    created = create(client, owner, name="split", alertmanager_url=closed_port_url()).json
    stamps, values = minute_series(INCIDENT_END + 10)
    values[45] += 60
    first = client.post(f"/monitors/{created['id']}/points", json={"timestamps": stamps[:46], "values": values[:46]},
                        headers=owner)
    assert first.json["is_anomaly"][45]
    second = client.post(f"/monitors/{created['id']}/points", json={"timestamps": stamps[46:], "values": values[46:]},
                         headers=owner)
    assert not second.json["is_anomaly"][0]
    with services_of(prom_app).database.transaction() as connection:
        events = list(connection.execute(select(monitor_events_table).where(
            monitor_events_table.c.monitor_id == created["id"]).order_by(monitor_events_table.c.seq)))
    assert [e.kind for e in events] == ["firing", "resolved"]
    firing, resolved = (json.loads(e.payload)["alert"]["annotations"] for e in events)
    assert resolved == firing and resolved["summary"].startswith(stamps[45])
