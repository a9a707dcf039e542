"""Monitors on real gunicorn servers: alerts survive a restart, and two servers on one PostgreSQL and one
Redis share one monitor and one alert queue without losing a point or sending an event twice."""

from __future__ import annotations

import json
import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    Receiver,
    RedisServer,
    Server,
    bearer,
    cli_in_process,
    minute_series,
    postgres_database,
    wait_for,
)

pytestmark = pytest.mark.slow

FAST_RETRIES = {
    "ALLOW_PRIVATE_WEBHOOKS": "1",
    "MONITOR_RETRY_BASE_SECONDS": "0.2",
    "MONITOR_RETRY_MAX_DELAY_SECONDS": "1",
    "FORECAST_WORKERS": "1",
    "LOG_LEVEL": "WARNING",
}


def create_key(env: dict[str, str]) -> str:
    out = cli_in_process("keys", "create", "--permissions", "read,write,delete", "--per-minute", "100000",
                         "--per-hour", "1000000", "--per-day", "10000000", "--json", env=env).stdout
    return json.loads(out)["key"]


def spiky_series(count: int, spikes: tuple[int, ...]) -> tuple[list[str], list[float]]:
    stamps, values = minute_series(count)
    for i in spikes:
        values[i] += 40
    return stamps, values


def deliveries(server: Server, key: str, monitor_id: str) -> list[dict[str, Any]]:
    answer = requests.get(f"{server.url}/monitors/{monitor_id}/deliveries?limit=1000", headers=bearer(key), timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["deliveries"]


def test_pending_alerts_survive_a_restart(tmp_path: Path) -> None:
    env = {**FAST_RETRIES, "DATABASE_URL": f"sqlite:///{tmp_path / 'monitors.sqlite3'}"}
    cli_in_process("db", "upgrade", env=env)
    key = create_key(env)
    # The port stays bound, without listening, until the receiver takes it: connections are refused (every
    # delivery fails), and no server of a test running beside this one can be given it meanwhile (one was,
    # and answered 400 where no answer was expected).
    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))
    receiver_port = reserved.getsockname()[1]
    first = Server(env, log_path=tmp_path / "first.log")
    try:
        first.wait_ready()
        created = requests.post(f"{first.url}/monitors", headers=bearer(key), timeout=10, json={
            "name": "restart", "data_frequency": "Minutes",
            "webhook_url": f"http://127.0.0.1:{receiver_port}/hook"}).json()
        monitor_id = created["id"]
        stamps, values = spiky_series(150, (100, 120, 140))
        answer = requests.post(f"{first.url}/monitors/{monitor_id}/points", headers=bearer(key), timeout=30,
                               json={"timestamps": stamps, "values": values})
        assert answer.status_code == 200, answer.text
        wait_for(lambda: any(d["attempts"] for d in deliveries(first, key, monitor_id)), 20, "a failed attempt")
    finally:
        first.stop()

    reserved.close()
    receiver = Receiver(receiver_port)
    receiver.secrets[monitor_id] = created["webhook_secret"]
    receiver.start()
    second = Server(env, log_path=tmp_path / "second.log")
    try:
        second.wait_ready()
        log = deliveries(second, key, monitor_id)
        events = receiver.wait_for(len(log), timeout=60)
        assert [e["sequence"] for e in events] == sorted(d["sequence"] for d in log)
        assert all(d["signature_ok"] for d in receiver.deliveries)
        # the receiver answers before the sender records the outcome: the last event may still read "sending"
        wait_for(lambda: all(d["status"] == "delivered" for d in deliveries(second, key, monitor_id)), 20,
                 "every delivery recorded as delivered")
        final = deliveries(second, key, monitor_id)
        head = next(d for d in final if d["sequence"] == 1)
        assert head["attempts"][0]["status_code"] is None and head["attempts"][-1]["status_code"] == 200
    finally:
        second.stop()
        receiver.stop()


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    log_dir = tmp_path_factory.mktemp("monitors-scale-out")
    with postgres_database() as database_url:
        redis = RedisServer(log_dir / "redis.log")
        try:
            env = {**FAST_RETRIES, "DATABASE_URL": database_url, "REDIS_URL": redis.url}
            cli_in_process("db", "upgrade", env=env)
            yield env
        finally:
            redis.stop()


def test_two_servers_share_monitors_and_the_alert_queue(shared_env: dict[str, str], tmp_path: Path) -> None:
    key = create_key(shared_env)
    receiver = Receiver().start()
    servers = [Server(shared_env, log_path=tmp_path / f"server-{i}.log") for i in range(2)]
    try:
        for server in servers:
            server.wait_ready()
        headers = bearer(key)
        monitors: list[str] = []
        for i in range(6):
            created = requests.post(f"{servers[i % 2].url}/monitors", headers=headers, timeout=10, json={
                "name": f"m{i}", "data_frequency": "Minutes", "webhook_url": receiver.url}).json()
            receiver.secrets[created["id"]] = created["webhook_secret"]
            monitors.append(created["id"])
        stamps, values = spiky_series(240, (120, 150, 151, 190, 220))

        def writer(job: tuple[str, Server]) -> int:
            # Two writers per monitor, one per server, each sending the whole stream in batches of 20.
            monitor_id, server = job
            stored = 0
            with requests.Session() as session:
                for start in range(0, 240, 20):
                    answer = session.post(f"{server.url}/monitors/{monitor_id}/points", headers=headers, timeout=60,
                                          json={"timestamps": stamps[start:start + 20],
                                                "values": values[start:start + 20]})
                    assert answer.status_code == 200, answer.text
                    stored += answer.json()["new_points"]
            return stored

        jobs = [(m, s) for m in monitors for s in servers]
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            stored = list(pool.map(writer, jobs))
        per_monitor: dict[str, int] = defaultdict(int)
        for (monitor_id, _), count in zip(jobs, stored, strict=True):
            per_monitor[monitor_id] += count
        assert per_monitor == {m: 240 for m in monitors}  # no point lost, none judged twice

        views = [requests.get(f"{servers[0].url}/monitors/{m}?points=240", headers=headers, timeout=10).json()
                 for m in monitors]
        assert all(v["point_count"] == 240 for v in views)
        scores = {json.dumps([p["anomaly_score"] for p in v["points"]]) for v in views}
        assert len(scores) == 1  # the same stream judged the same on every monitor, whichever server stored it

        expected = {m: len(deliveries(servers[1], key, m)) for m in monitors}
        assert all(count > 0 for count in expected.values())
        total = sum(expected.values())
        events = receiver.wait_for(total, timeout=60)
        time.sleep(2)  # a duplicate send would arrive after the last expected event
        events = receiver.acknowledged()
        ids = [e["id"] for e in events]
        assert len(ids) == total and len(set(ids)) == total  # every event, none twice
        by_monitor: dict[str, list[int]] = defaultdict(list)
        for event in events:
            by_monitor[event["monitor_id"]].append(event["sequence"])
        assert all(seqs == list(range(1, expected[m] + 1)) for m, seqs in by_monitor.items())
        assert all(d["signature_ok"] for d in receiver.deliveries)
        logs = [d for m in monitors for d in deliveries(servers[0], key, m)]
        assert all(d["status"] == "delivered" and len(d["attempts"]) == 1 for d in logs)
    finally:
        for server in servers:
            server.stop()
        receiver.stop()
