"""Prometheus multiprocess mode under a real gunicorn with two worker processes, one of which is killed.

gunicorn's child_exit marks the dead worker's files dead, so the live gauges (forecast_workers_ready, summed
over live processes) count the replacement and not the corpse, while counters keep the dead worker's requests.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from tests.support import (
    REDIS_URL,
    Server,
    bearer,
    child_pids,
    cli_in_process,
    cmdline,
    missing_service,
    redis_available,
)

pytestmark = pytest.mark.slow


def gunicorn_workers(server: Server) -> list[int]:
    return [pid for pid in child_pids(server.process.pid) if "gunicorn" in cmdline(pid)]


def scrape(server: Server, admin_key: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = requests.get(server.url + "/metrics", headers={**bearer(admin_key), "Connection": "close"}, timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _values(path: Path) -> list[tuple[str, float, float, int]]:
    if path.stat().st_size < 8:
        return []  # created a moment ago; its writer has not sized it and written its header yet
    return list(MmapedDict.read_all_values_from_file(str(path)))


def verify_requests_counted(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return sum(value for (name, labels), value in samples.items()
               if name == "forecast_http_requests_total" and ("endpoint", "/verify") in labels
               and ("status", "200") in labels)


def test_a_killed_worker_is_marked_dead_and_metrics_still_add_up(tmp_path: Path) -> None:
    if not redis_available():
        missing_service(f"Redis is not reachable at {REDIS_URL} (two worker processes need REDIS_URL)")
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    (multiproc / "counter_999999.db").write_bytes(b"stale")  # a previous run's file: wiped at start
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'keys.sqlite3'}",
        "FORECAST_WORKERS": "1",
        "WEB_CONCURRENCY": "2",
        "REDIS_URL": REDIS_URL,
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
        "LOG_LEVEL": "WARNING",
    }
    cli_in_process("db", "upgrade", env=env)
    admin = json.loads(cli_in_process("keys", "create", "--permissions", "admin", "--json", env=env).stdout)["key"]
    reader = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "100000",
                                       "--per-hour", "1000000", "--per-day", "10000000", "--json",
                                       env=env).stdout)["key"]
    server = Server(env, log_path=tmp_path / "gunicorn.log")
    verified = 0

    def verify(times: int) -> None:
        nonlocal verified
        for _ in range(times):  # a new connection each time, so both processes serve some
            response = requests.get(server.url + "/verify", headers={**bearer(reader), "Connection": "close"},
                                    timeout=10)
            assert response.status_code == 200, response.text
            verified += 1

    def forecast_worker_ready_in(pid: int) -> None:
        # Read the value that process wrote: a /readyz answer could come from either process.
        path, deadline = multiproc / f"gauge_livesum_{pid}.db", time.monotonic() + 120
        while not (path.exists() and [v for *_, v, _, _ in _values(path)] == [1.0]):
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.2)

    try:
        server.wait_ready()
        assert not (multiproc / "counter_999999.db").exists()
        for pid in gunicorn_workers(server):
            forecast_worker_ready_in(pid)
        verify(40)
        before = scrape(server, admin)
        assert before[("forecast_workers_ready", ())] == 2  # one forecast worker in each of two processes
        assert verify_requests_counted(before) == verified

        gunicorn_workers_before = gunicorn_workers(server)
        victim = gunicorn_workers_before[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not (len(workers := gunicorn_workers(server)) == 2 and victim not in workers):
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.2)
        (replacement,) = set(workers) - set(gunicorn_workers_before)
        forecast_worker_ready_in(replacement)
        verify(40)

        after = scrape(server, admin)
        # The replacement's forecast worker is counted, the dead process's is not: still 2, not 3.
        assert after[("forecast_workers_ready", ())] == 2, server.log()[-2000:]
        # Counters keep what the dead process counted: every /verify answered, once.
        assert verify_requests_counted(after) == verified
    finally:
        server.stop()
