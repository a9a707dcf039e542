"""Prometheus in, Alertmanager out, with the real things: Prometheus scrapes a small exporter whose values this
test controls, a real gunicorn and a real `jobs worker` read a monitor's query from it, judge the points, expose
the verdicts (which Prometheus scrapes back), and send the anomaly to a real Alertmanager, firing and resolved. A
query that yields several series is a monitor of several series: each judged on its own, exposed and alerted with
its labels.

Between our service and Prometheus sits a TCP relay the test can cut (connections dropped: "unreachable") or
stall (connections held: "timeout") while Prometheus keeps scraping, so the points it gathers meanwhile must be
read once the relay passes again."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    AlertmanagerServer,
    JobWorker,
    PrometheusServer,
    ScrapeTarget,
    Server,
    bearer,
    cli_in_process,
    wait_for,
)

pytestmark = pytest.mark.slow

METRIC = "exporter_queue_depth"
FLEET = "exporter_node_load"
NODES = 3
SPIKE_NODE = "n1"
SPIKE = 80.0


class Exporter(ScrapeTarget):
    """The metric source Prometheus scrapes: a smooth baseline, a spike for an exact number of scrapes, and then
    nothing at all (the series goes stale in Prometheus) until it is told to come back."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "normal"
        self.spike_scrapes = 0
        self.scrapes = 0
        self._lock = threading.Lock()

    def body(self) -> str:
        with self._lock:
            self.scrapes += 1
            if self.mode == "absent":
                return ""
            value = 10 + 2 * math.sin(self.scrapes / 5) + 0.3 * math.cos(self.scrapes * 1.7)
            if self.mode == "spike":
                value += SPIKE
                self.spike_scrapes -= 1
                if self.spike_scrapes <= 0:
                    self.mode = "absent"
            lines = [f"# TYPE {METRIC} gauge", f"{METRIC} {value}", f"# TYPE {FLEET} gauge"]
            for node in range(NODES):
                load = 5 + node + 1.5 * math.sin(self.scrapes / 4 + node) + 0.2 * math.cos(self.scrapes * 1.3)
                if value > SPIKE and f"n{node}" == SPIKE_NODE:
                    load += SPIKE
                lines.append(f'{FLEET}{{node="n{node}"}} {load}')
        return "\n".join(lines) + "\n"

    def spike(self, scrapes: int) -> None:
        with self._lock:
            self.mode, self.spike_scrapes = "spike", scrapes

    def restore(self) -> None:
        with self._lock:
            self.mode = "normal"


class Relay:
    """A TCP relay to Prometheus: "pass" forwards, "cut" drops each connection at once, "stall" holds it open
    without an answer."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode == "cut":
                client.close()
            elif self.mode == "stall":
                self._held.append(client)
            else:
                threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError:
            client.close()
            return

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while chunk := source.recv(65536):
                    sink.sendall(chunk)
            except OSError:
                pass
            finally:
                for end in (source, sink):
                    try:
                        end.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        for held in self._held:
            held.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    alertmanager = AlertmanagerServer(tmp_path / "alertmanager")
    exporter = Exporter().start()
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'monitors.sqlite3'}",
        "ALLOW_PRIVATE_WEBHOOKS": "1",
        "MONITOR_RETRY_BASE_SECONDS": "0.2",
        "MONITOR_RETRY_MAX_DELAY_SECONDS": "1",
        "PROMETHEUS_TIMEOUT_SECONDS": "2",
        "FORECAST_WORKERS": "1",
        "LOG_LEVEL": "WARNING",
        "PUBLIC_URL": "https://forecast.example.com",
    }
    cli_in_process("db", "upgrade", env=env)
    key = json.loads(cli_in_process("keys", "create", "--permissions", "read,write,admin,delete", "--per-minute",
                                    "100000", "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                    env=env).stdout)["key"]
    server = Server(env, log_path=tmp_path / "gunicorn.log")
    prometheus = PrometheusServer(tmp_path / "prometheus", [
        {"job_name": "exporter", "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]},
        {"job_name": "forecast", "metrics_path": "/monitors/metrics",
         "authorization": {"type": "Bearer", "credentials": key},
         "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]},
    ])
    worker: JobWorker | None = None
    relay: Relay | None = None
    try:
        alertmanager.start()
        prometheus.start()
        relay = Relay(prometheus.port)
        server.wait_ready()
        worker = JobWorker({**env, "LOG_LEVEL": "INFO"}, processes=2, log_path=tmp_path / "worker.log")
        yield {"server": server, "key": key, "prometheus": prometheus, "alertmanager": alertmanager,
               "exporter": exporter, "relay": relay, "worker": worker}
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
        if relay is not None:
            relay.stop()
        prometheus.stop()
        alertmanager.stop()
        exporter.stop()


def read_once(found: dict[str, Any], ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The monitor once ``ready`` holds and its source has recorded a read's outcome, else None."""
    return found if ready(found) and found["source"]["status"] != "pending" else None


def test_a_prometheus_query_is_judged_exposed_and_alerted(stack: dict[str, Any]) -> None:
    server, key = stack["server"], stack["key"]
    prometheus, alertmanager = stack["prometheus"], stack["alertmanager"]
    exporter, relay, worker = stack["exporter"], stack["relay"], stack["worker"]
    headers = bearer(key)

    def monitor(monitor_id: str) -> dict[str, Any]:
        answer = requests.get(f"{server.url}/monitors/{monitor_id}?points=1000", headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def exposed(name: str, monitor_id: str) -> float | None:
        text = requests.get(f"{server.url}/monitors/metrics", headers=headers, timeout=10).text
        for line in text.splitlines():
            if line.startswith(name + "{") and f'monitor_id="{monitor_id}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return None

    # Some history in Prometheus first: the monitor's backfill reads it.
    wait_for(lambda: len(prometheus.query(f"count_over_time({METRIC}[1m])") or []) and
             float(prometheus.query(f"count_over_time({METRIC}[1m])")[0]["value"][1]) >= 15, 60,
             "15 scrapes of the exporter")
    created = requests.post(f"{server.url}/monitors", headers=headers, timeout=10, json={
        "name": "queue depth", "data_frequency": "Seconds", "prometheus_url": relay.url,
        "prometheus_query": METRIC, "alertmanager_url": alertmanager.url,
    })
    assert created.status_code == 201, created.text
    monitor_id = created.json()["id"]
    assert created.json()["source"]["kind"] == "prometheus"
    several = requests.post(f"{server.url}/monitors", headers=headers, timeout=10, json={
        "name": "two jobs", "data_frequency": "Seconds", "prometheus_url": relay.url, "prometheus_query": "up"})
    assert several.status_code == 201, several.text
    nodes = requests.post(f"{server.url}/monitors", headers=headers, timeout=10, json={
        "name": "node load", "data_frequency": "Seconds", "prometheus_url": relay.url,
        "prometheus_query": f"{FLEET} * 1", "alertmanager_url": alertmanager.url})
    assert nodes.status_code == 201, nodes.text
    nodes_id = nodes.json()["id"]
    pushed = requests.post(f"{server.url}/monitors/{monitor_id}/points", headers=headers, timeout=10,
                           json={"timestamps": ["2026-01-01T00:00:00Z"], "values": [1.0]})
    assert pushed.status_code == 400 and "Prometheus" in pushed.json()["error"]["message"]

    # A read stores its points, then records its outcome: both are waited for.
    backfilled = wait_for(lambda: read_once(monitor(monitor_id), lambda m: m["point_count"] >= 15), 60,
                          f"the backfill\n{worker.log()[-3000:]}")
    assert backfilled["source"]["status"] == "ok", backfilled["source"]
    # `up` yields a series per scrape job: a monitor of two series, each with its labels.
    up = wait_for(lambda: read_once(monitor(several.json()["id"]), lambda m: m["series_count"] == 2
                                    and "2 series" in (m["source"]["message"] or "")), 30, "the two series of up")
    assert up["source"]["status"] == "ok" and "2 series" in up["source"]["message"], up["source"]
    assert sorted(s["labels"]["job"] for s in up["series"]) == ["exporter", "forecast"]
    assert all(s["labels"]["__name__"] == "up" and s["point_count"] >= 10 for s in up["series"])

    # Live reading: the count grows second by second, every stored point one step after the previous one.
    wait_for(lambda: monitor(monitor_id)["point_count"] >= backfilled["point_count"] + 10, 30, "live points")
    assert exposed("forecast_monitor_anomalous", monitor_id) == 0

    # One scrape of a spike, then the series disappears: the anomaly's run stays open (no normal point follows).
    exporter.spike(1)
    wait_for(lambda: exposed("forecast_monitor_anomalous", monitor_id) == 1, 30,
             f"the spike's verdict in the exposition\n{worker.log()[-3000:]}")
    assert exposed("forecast_monitor_value", monitor_id) > SPIKE
    assert exposed("forecast_monitor_upper_bound", monitor_id) < SPIKE
    firing = wait_for(lambda: alertmanager.alerts(monitor_id=monitor_id), 30, "the firing alert in Alertmanager")
    alert = firing[0]
    assert alert["status"]["state"] == "active"
    assert alert["labels"]["alertname"] == "MonitorAnomaly" and alert["labels"]["monitor_name"] == "queue depth"
    assert alert["annotations"]["monitor"] == f"https://forecast.example.com/monitors/{monitor_id}"
    assert alert["generatorURL"].startswith("https://forecast.example.com/dashboard/monitors")
    # The node monitor's spiked series alone fires, its alert carrying that series' labels.
    node_alerts = wait_for(lambda: alertmanager.alerts(monitor_id=nodes_id), 30, "the node's firing alert")
    assert len(node_alerts) == 1, node_alerts
    labels = node_alerts[0]["labels"]
    assert labels["node"] == SPIKE_NODE and labels["job"] == "exporter" and labels["monitor_name"] == "node load"
    assert "__name__" not in labels and labels["instance"].startswith("127.0.0.1:")
    node_view = monitor(nodes_id)
    assert node_view["series_count"] == NODES and node_view["source"]["status"] in ("ok", "no_series")
    spiked = [s for s in node_view["series"] if s["labels"]["node"] == SPIKE_NODE][0]
    assert labels["series_id"] == str(spiked["id"])
    assert node_alerts[0]["annotations"]["series"] == (
        f"https://forecast.example.com/monitors/{nodes_id}/series/{spiked['id']}")
    assert {s["labels"]["node"] for s in node_view["series"] if s["open_anomaly_since"]} == {SPIKE_NODE}
    gauges = requests.get(f"{server.url}/monitors/metrics", headers=headers, timeout=10).text
    for node in range(NODES):
        assert f'monitor_name="node load",instance="127.0.0.1:{exporter.port}",job="exporter",node="n{node}"' \
            in gauges
    stale = wait_for(lambda: monitor(monitor_id)["source"]["status"] == "no_series" and monitor(monitor_id), 30,
                     "the no-series state once the series is gone")
    assert "no series" in stale["source"]["message"] and stale["open_anomalies"]
    # Prometheus scraped the verdicts back: what a Grafana panel queries for the band.
    wait_for(lambda: prometheus.query(f'forecast_monitor_anomalous{{monitor_id="{monitor_id}"}} == 1'), 30,
             "Prometheus to scrape the verdict")

    # Prometheus unreachable, then slow, while it keeps scraping the restored exporter.
    relay.mode = "cut"
    exporter.restore()
    cut = wait_for(lambda: monitor(monitor_id)["source"]["status"] == "unreachable" and monitor(monitor_id), 30,
                   "the unreachable state")
    assert "unreachable" in cut["source"]["message"]
    relay.mode = "stall"
    slow = wait_for(lambda: monitor(monitor_id)["source"]["status"] == "timeout" and monitor(monitor_id), 30,
                    "the timeout state")
    assert "2 s" in slow["source"]["message"]
    outage_start = cut["last_timestamp"]
    time.sleep(3)
    relay.mode = "pass"
    back = wait_for(lambda: monitor(monitor_id)["source"]["status"] == "ok" and not monitor(monitor_id)[
        "open_anomalies"] and monitor(monitor_id), 60, "the catch-up and the anomaly's end")
    # What Prometheus gathered during the outage is read: consecutive seconds from the exporter's return on.
    stamps = [p["timestamp"] for p in back["points"] if p["timestamp"] > outage_start]
    epochs = [int(time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))) for s in stamps]
    assert len(epochs) >= 8 and all(b - a == 1 for a, b in zip(epochs[1:], epochs[2:], strict=False)), stamps

    wait_for(lambda: not alertmanager.alerts(monitor_id=monitor_id), 30, "the alert's resolution in Alertmanager")
    log = requests.get(f"{server.url}/monitors/{monitor_id}/deliveries", headers=headers, timeout=10).json()
    sent = [(d["type"], d["status"]) for d in sorted(log["deliveries"], key=lambda d: d["sequence"])
            if d["destination"] == "alertmanager"]
    assert sent[0] == ("firing", "delivered") and sent[-1] == ("resolved", "delivered"), sent
