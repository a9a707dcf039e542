"""Prometheus remote write, with the real things: a real Prometheus scrapes a small exporter of several series and
remote-writes them to a real gunicorn, which routes each series to the monitors whose selector matches it (one
monitor per shard, and one monitor over the whole fleet that follows each shard as a series of its own), stores and
judges every sample once, counts the samples no monitor takes, and loses nothing across its own restart
(Prometheus keeps the samples in its WAL and retries)."""

from __future__ import annotations

import calendar
import json
import math
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    ROOT,
    VENV_BIN,
    PrometheusServer,
    ScrapeTarget,
    Server,
    bearer,
    cli_in_process,
    free_port,
    wait_for,
)

pytestmark = pytest.mark.slow

METRIC = "fleet_load"
SHARDS = 4
SPIKE_SHARD = 2


class Fleet(ScrapeTarget):
    """One gauge per shard, smooth and distinct; one shard can be told to spike for a scrape."""

    def __init__(self) -> None:
        super().__init__()
        self.scrapes = 0
        self.spike_next = False
        self._lock = threading.Lock()

    def body(self) -> str:
        with self._lock:
            self.scrapes += 1
            spike, self.spike_next = self.spike_next, False
            lines = [f"# TYPE {METRIC} gauge"]
            for shard in range(SHARDS):
                value = 10 + shard + 2 * math.sin(self.scrapes / 5 + shard) + 0.3 * math.cos(self.scrapes * 1.7)
                if spike and shard == SPIKE_SHARD:
                    value += 80
                lines.append(f'{METRIC}{{shard="{shard}"}} {value}')
            lines.append(f"fleet_unwatched_total {self.scrapes}")
        return "\n".join(lines) + "\n"


class PortServer(Server):
    """gunicorn on a given port, so a restarted service is where Prometheus keeps sending."""

    def __init__(self, env: dict[str, str], *, port: int, log_path: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "a")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(VENV_BIN / "gunicorn"), "--bind", f"127.0.0.1:{port}", "wsgi:app"], cwd=ROOT,
            env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    fleet = Fleet().start()
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'monitors.sqlite3'}", "FORECAST_WORKERS": "1",
           "LOG_LEVEL": "WARNING", "WEB_CONCURRENCY": "1", "ALLOW_PRIVATE_WEBHOOKS": "1"}
    cli_in_process("db", "upgrade", env=env)
    key = json.loads(cli_in_process("keys", "create", "--permissions", "read,write,admin", "--per-minute",
                                    "100000", "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                    env=env).stdout)["key"]
    port = free_port()
    servers = [PortServer(env, port=port, log_path=tmp_path / "gunicorn.log")]
    prometheus = PrometheusServer(tmp_path / "prometheus", [
        {"job_name": "fleet", "static_configs": [{"targets": [f"127.0.0.1:{fleet.port}"]}]},
    ])
    # JSON is YAML: the block README shows, with short waits so the test runs in seconds.
    config = json.loads((tmp_path / "prometheus" / "prometheus.yml").read_text())
    config["remote_write"] = [{
        "url": f"http://127.0.0.1:{port}/api/v1/write",
        "authorization": {"type": "Bearer", "credentials": key},
        "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms", "max_backoff": "1s",
                         "retry_on_http_429": True},
    }]
    (tmp_path / "prometheus" / "prometheus.yml").write_text(json.dumps(config))
    try:
        servers[0].wait_ready()
        yield {"servers": servers, "env": env, "port": port, "key": key, "prometheus": prometheus, "fleet": fleet,
               "tmp_path": tmp_path}
    finally:
        prometheus.stop()
        for server in servers:
            if server.process.poll() is None:
                server.stop()
        fleet.stop()


def test_prometheus_remote_writes_a_fleet_through_a_restart(stack: dict[str, Any]) -> None:
    servers, key, prometheus, fleet = stack["servers"], stack["key"], stack["prometheus"], stack["fleet"]
    headers = bearer(key)
    url = servers[0].url
    monitors: dict[int, str] = {}
    for shard in range(SHARDS):
        created = requests.post(f"{url}/monitors", headers=headers, timeout=10, json={
            "name": f"load {shard}", "data_frequency": "Seconds",
            "remote_write_selector": f'{METRIC}{{shard="{shard}", job="fleet"}}'})
        assert created.status_code == 201, created.text
        monitors[shard] = created.json()["id"]
    created = requests.post(f"{url}/monitors", headers=headers, timeout=10, json={
        "name": "the fleet", "data_frequency": "Seconds", "remote_write_selector": f'{METRIC}{{job="fleet"}}',
        "webhook_url": "http://127.0.0.1:9/nowhere"})
    assert created.status_code == 201, created.text
    fleet_monitor = created.json()["id"]

    def points(shard: int) -> list[dict[str, Any]]:
        answer = requests.get(f"{url}/monitors/{monitors[shard]}?points=10000", headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["points"]

    def series_points(shard: int) -> list[dict[str, Any]]:
        """The points of the fleet monitor's series of that shard."""
        answer = requests.get(f"{url}/monitors/{fleet_monitor}/series", headers=headers, timeout=10, params={
            "match": f'{{shard="{shard}"}}', "points": 1000})
        assert answer.status_code == 200, answer.text
        found = answer.json()["series"]
        assert len(found) <= 1
        return found[0]["points"] if found else []

    prometheus.start()
    wait_for(lambda: all(len(points(s)) >= 10 and len(series_points(s)) >= 10 for s in range(SHARDS)), 90,
             f"10 remote-written points per shard\n{servers[-1].log()[-3000:]}")

    # The service goes away for a few scrapes; Prometheus keeps them and retries until it is back.
    before = {s: len(points(s)) for s in range(SHARDS)}
    servers[-1].stop()
    scrapes_at_stop = fleet.scrapes
    wait_for(lambda: fleet.scrapes >= scrapes_at_stop + 4, 30, "scrapes while the service is down")
    servers.append(PortServer(stack["env"], port=stack["port"], log_path=stack["tmp_path"] / "gunicorn-2.log"))
    servers[-1].wait_ready()
    wait_for(lambda: all(len(points(s)) >= before[s] + 8 for s in range(SHARDS)), 90,
             f"the points of the outage and after\n{servers[-1].log()[-3000:]}")

    # Every sample Prometheus holds, from the first stored to the last stored, is stored once with its value (the
    # first of a whole second, as the service identifies points by whole seconds).
    for shard in range(SHARDS):
        stored = points(shard)
        first = stored[0]["timestamp"]
        last = stored[-1]["timestamp"]
        answer = requests.get(f"{prometheus.url}/api/v1/query", timeout=10, params={
            "query": f'{METRIC}{{shard="{shard}"}}[10m]'}).json()
        samples = answer["data"]["result"][0]["values"]
        expected: dict[int, float] = {}
        for moment, value in samples:
            expected.setdefault(math.floor(float(moment)), float(value))
        first_epoch, last_epoch = _epoch(first), _epoch(last)
        wanted = [(e, v) for e, v in sorted(expected.items()) if first_epoch <= e <= last_epoch]
        assert [(_epoch(p["timestamp"]), p["value"]) for p in stored] == wanted, (shard, _counters(url, headers))
        # The fleet monitor's series of this shard holds the same samples, judged the same way. Prometheus goes on
        # writing between the two reads: they are compared up to the newest point both hold.
        in_fleet = series_points(shard)
        newest = min(last_epoch, _epoch(in_fleet[-1]["timestamp"]))
        in_fleet = [p for p in in_fleet if _epoch(p["timestamp"]) <= newest]
        in_shard = [p for p in stored if _epoch(p["timestamp"]) <= newest][-len(in_fleet):]
        assert len(in_fleet) >= 10
        assert [p["timestamp"] for p in in_fleet] == [p["timestamp"] for p in in_shard]
        assert [p["anomaly_score"] for p in in_fleet] == [p["anomaly_score"] for p in in_shard]

    # One scrape of a spike on one shard: that shard's monitor, and only it, judges an anomaly.
    def anomalous(shard: int) -> bool:
        return any(p["is_anomaly"] for p in points(shard)[-5:])

    def anomalous_in_fleet(shard: int) -> bool:
        return any(p["is_anomaly"] for p in series_points(shard)[-5:])

    fleet.spike_next = True
    wait_for(lambda: anomalous(SPIKE_SHARD) and anomalous_in_fleet(SPIKE_SHARD), 60,
             f"the spike's verdict\n{servers[-1].log()[-3000:]}")
    assert not any(anomalous(s) or anomalous_in_fleet(s) for s in range(SHARDS) if s != SPIKE_SHARD)
    # The alert names the shard's series; the fleet monitor's gauges carry each shard's labels.
    deliveries = requests.get(f"{url}/monitors/{fleet_monitor}/deliveries", headers=headers, timeout=10).json()
    spiked = [d for d in deliveries["deliveries"] if d["type"] == "anomaly"]
    shard_series = requests.get(f"{url}/monitors/{fleet_monitor}/series", headers=headers, timeout=10, params={
        "match": f'{{shard="{SPIKE_SHARD}"}}'}).json()["series"][0]
    assert spiked and {d["series_id"] for d in spiked} == {shard_series["id"]}
    gauges = requests.get(f"{url}/monitors/metrics", headers=headers, timeout=10).text
    for shard in range(SHARDS):
        assert f'forecast_monitor_value{{monitor_id="{fleet_monitor}",monitor_name="the fleet",instance=' in gauges
        assert f'job="fleet",shard="{shard}",series_id=' in gauges

    # What no monitor takes (the unwatched counter, Prometheus' own up and scrape_* series) is counted.
    def counted(outcome: str) -> float:
        text = requests.get(f"{url}/metrics", headers=headers, timeout=10).text
        prefix = f'forecast_remote_write_samples_total{{outcome="{outcome}"}} '
        return sum(float(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))

    wait_for(lambda: counted("unmatched") > 0 and counted("stored") > 0, 30, "the samples counter")
    assert "Traceback" not in "".join(s.log_path.read_text() for s in servers)


def _counters(url: str, headers: dict[str, str]) -> list[str]:
    text = requests.get(f"{url}/metrics", headers=headers, timeout=10).text
    return [line for line in text.splitlines() if line.startswith("forecast_remote_write_samples_total")]


def _epoch(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
