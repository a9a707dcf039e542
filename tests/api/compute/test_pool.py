"""A forecast worker process that dies while idle (kill -9, the OOM killer): readiness says so at once, a
replacement starts, and the next forecast, whose job never reached the dead worker, is answered by another one.
Real worker processes, in-process app."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from app.compute.forecast.work import ForecastWork
from app.compute.pool import WorkerCrashed, WorkerPool
from tests.support import bearer, build_app, new_key, services_of, settings_for, wait_for

BODY = {
    "series": [{"timestamps": [f"2026-01-{day:02d}T00:00:00" for day in range(1, 25)],
                "values": [float(10 + day % 5) for day in range(24)]}],
    "forecast_horizon": 3,
    "data_frequency": "Daily",
    "forecast_frequency": "Daily",
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Flask, str]]:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'keys.sqlite3'}", forecast_workers=2), start_workers=True)
    key, _ = new_key(app, permissions=("read",), per_minute=10_000)
    yield app, key
    services_of(app).close()


def _dead(pid: int) -> bool:
    """Every thread of the process has exited (it may be a zombie its parent, this process, has not reaped): its
    pipe is closed then. Its main thread alone in the zombie state is not enough: the others may still be
    exiting, holding the pipe open."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return False
        except (FileNotFoundError, ProcessLookupError):
            continue  # that thread has just gone
    return True


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _dead(pid), timeout=10, message=f"worker {pid} to die")


def _workers_checked(app: Flask) -> str:
    response = app.test_client().get("/readyz")
    return str(response.get_json()["checks"]["forecast_workers"])


def test_readiness_counts_a_dead_idle_worker_out_and_replaces_it(served: tuple[Flask, str]) -> None:
    app, key = served
    pool = services_of(app).pool
    assert _workers_checked(app) == "2/2"
    victim = pool.worker_pids()[0]
    _kill(victim)
    assert _workers_checked(app) == "1/2"  # the truth, at once: one worker can take a job
    forecast = app.test_client().post("/forecast", headers=bearer(key), json=BODY)
    assert forecast.status_code == 200, forecast.get_data(as_text=True)
    wait_for(lambda: _workers_checked(app) == "2/2", timeout=60, message="the replacement worker")
    assert victim not in pool.worker_pids()


def test_a_forecast_whose_idle_workers_all_died_runs_on_a_replacement(served: tuple[Flask, str]) -> None:
    app, key = served
    pool = services_of(app).pool
    pids = pool.worker_pids()
    assert len(pids) == 2
    for pid in pids:
        _kill(pid)
    # No readiness probe in between: the forecast itself finds both dead before handing its job over.
    forecast = app.test_client().post("/forecast", headers=bearer(key), json=BODY)
    assert forecast.status_code == 200, forecast.get_data(as_text=True)
    assert len(forecast.get_json()["median"]) == 3
    assert not set(pids) & set(pool.worker_pids())


def test_a_job_sent_to_a_worker_that_dies_before_reading_it_runs_on_another(served: tuple[Flask, str]) -> None:
    # A stopped worker passes every check (its process is there, its pipe quiet) and takes the job into its pipe
    # unread; killed then, it never ran the job, which goes to the other worker.
    import threading

    app, key = served
    pool = services_of(app).pool
    first, _ = pool.worker_pids()
    os.kill(first, signal.SIGSTOP)
    answers: list[int] = []
    client = threading.Thread(target=lambda: answers.append(
        app.test_client().post("/forecast", headers=bearer(key), json=BODY).status_code))
    try:
        client.start()
        wait_for(lambda: first not in pool.worker_pids(), timeout=10, message="the job to be handed to the worker")
        time.sleep(0.5)  # the job is written into its pipe right after
    finally:
        os.kill(first, signal.SIGKILL)
    client.join(timeout=60)
    assert answers == [200]


class KillsItsWorker:
    """A job that takes its worker down with it (as a segfault in a native library would)."""

    def run(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_job_that_kills_its_worker_fails_and_is_not_run_again() -> None:
    # It did start: running it on another worker would take that one down too.
    pool = WorkerPool(workers=2, timeout_seconds=30, queue_limit=4)
    pool.start(wait=True)
    try:
        with pytest.raises(WorkerCrashed):
            pool.submit(KillsItsWorker())
        job = ForecastWork("forecast-model-2", [float(i % 5) for i in range(50)], 4, 0.9, (5,))
        assert len(pool.submit(job).median) == 4
        wait_for(lambda: pool.check_idle_workers() == 2, timeout=60, message="the replacement worker")
    finally:
        pool.close()
