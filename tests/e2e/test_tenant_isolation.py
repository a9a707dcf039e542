"""Accounts that cannot starve each other, through a real gunicorn and a real `jobs worker`: one account's
Prometheus monitors on a server that accepts connections and never answers, and another account's large batch,
must not keep a third account's one-series batch waiting for either. Before, a poller round outlived its lease
and tied up both job processes, and batches were served first come, first served: the small batch finished
after the large one. bench/tenant_isolation.py measures the same scene's latency (the target lives there)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    JobWorker,
    Server,
    Tarpit,
    batch_finished,
    batch_status,
    bearer,
    cli_in_process,
    served_with_jobs,
    wait_for,
)

pytestmark = pytest.mark.slow

HANGING_MONITORS = 60
LARGE_BATCH_SERIES = 400
FIELDS = {"forecast_horizon": 6, "data_frequency": "Monthly", "forecast_frequency": "Monthly"}
ENV = {"FORECAST_WORKERS": "1", "LOG_LEVEL": "WARNING", "ALLOW_PRIVATE_WEBHOOKS": "1",
       "PROMETHEUS_TIMEOUT_SECONDS": "5"}


def create_key(env: dict[str, str], account: str) -> str:
    out = cli_in_process("keys", "create", "--permissions", "read,write,delete", "--account", account,
                         "--per-minute", "100000", "--per-hour", "1000000", "--per-day", "10000000", "--json",
                         env=env).stdout
    return json.loads(out)["key"]


def monthly(identifier: str, seed: int, count: int = 72) -> dict[str, Any]:
    start = datetime(2018, 1, 1)
    return {
        "id": identifier,
        "timestamps": [datetime(start.year + (start.month - 1 + i) // 12, (start.month - 1 + i) % 12 + 1, 1)
                       .strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)],
        "values": [100 + seed % 17 + 10 * math.sin(2 * math.pi * i / 12 + seed) + 0.3 * i + math.cos(i * (seed + 1))
                   for i in range(count)],
    }


def submit(server: Server, key: str, series: list[dict[str, Any]], model: str) -> str:
    answer = requests.post(f"{server.url}/batches", json={**FIELDS, "series": series}, timeout=60,
                           headers={**bearer(key), "X-Model-Id": model})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Server, JobWorker, dict[str, str]]]:
    env = {**ENV, "DATABASE_URL": f"sqlite:///{tmp_path / 'tenants.sqlite3'}"}
    with served_with_jobs(env, tmp_path, processes=2) as (server, worker):
        yield server, worker, env


def test_hanging_sources_and_a_large_batch_do_not_hold_back_another_accounts_small_batch(
        service: tuple[Server, JobWorker, dict[str, str]]) -> None:
    server, worker, env = service
    hoarder, bulk, small = (create_key(env, account) for account in ("acct-hanging", "acct-bulk", "acct-small"))
    tarpit = Tarpit()
    try:
        # Account 1: monitors on a Prometheus that never answers, each on its own path (one failure memory per
        # URL would not catch them).
        for i in range(HANGING_MONITORS):
            created = requests.post(f"{server.url}/monitors", headers=bearer(hoarder), timeout=10, json={
                "name": f"hang-{i}", "data_frequency": "Minutes", "prometheus_url": f"{tarpit.url}/p{i}",
                "prometheus_query": "up"})
            assert created.status_code == 201, created.text
        wait_for(lambda: tarpit.accepted >= 2, 30, "the poller to be held by the tarpit")

        # Account 2: a large batch of the slowest model, queued first.
        large = submit(server, bulk, [monthly(f"sku-{i}", i) for i in range(LARGE_BATCH_SERIES)], "forecast-model-1")
        wait_for(lambda: batch_status(server, bulk, large)["progress"]["done"] > 0, 120, "the large batch to start")

        # Account 3: one series, queued behind all of it.
        tiny = submit(server, small, [monthly("only", 7)], "forecast-model-1")
        done = batch_finished(server, small, tiny, timeout=240, interval=0.2)
        assert done["status"] == "done" and done["progress"] == {"total": 1, "done": 1, "failed": 0}, done

        # It did not wait for the large batch: that one is still under way, most of it not yet computed.
        still = batch_status(server, bulk, large)
        assert still["status"] in ("queued", "running"), still
        assert still["progress"]["done"] < LARGE_BATCH_SERIES // 2, still

        # The hanging monitors are reported as what they are once their reads time out, not left pending.
        def states() -> set[str]:
            listed = requests.get(f"{server.url}/monitors?limit=100", headers=bearer(hoarder), timeout=30).json()
            return {m["source"]["status"] for m in listed["monitors"]}

        wait_for(lambda: "timeout" in states(), 60, "a hanging monitor's read to time out")
    finally:
        tarpit.stop()
    assert "Traceback" not in server.log() + worker.log()
