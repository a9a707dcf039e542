"""POST /forecast answered by real models in real worker processes."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.compute.forecast.catalog import MODEL_IDS
from app.compute.forecast.work import ForecastWork
from app.compute.pool import WorkerPool, WorkTimeout
from tests.support import ROOMY_LIMITS, bearer, build_app, new_key, services_of, serving_app, settings_for


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    with serving_app(tmp_path_factory, "forecast", forecast_workers=2) as app:
        yield app


@pytest.fixture(scope="module")
def key(app: Flask) -> str:
    return new_key(app, permissions=("read",), **ROOMY_LIMITS)[0]


def hourly(points: int, start: datetime = datetime(2026, 3, 1)) -> dict[str, Any]:
    stamps = [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(points)]
    values = [100 + 20 * math.sin(2 * math.pi * i / 24) + (i % 7) for i in range(points)]
    return {
        "series": [{"timestamps": stamps, "values": values}],
        "forecast_horizon": 12,
        "data_frequency": "Hours",
        "forecast_frequency": "Hours",
    }


def check_forecast(body: dict[str, Any], horizon: int) -> None:
    assert list(body) == ["forecast_timestamps", "lower_bound", "median", "upper_bound"]
    for name in body:
        assert len(body[name]) == horizon
    for low, mid, high in zip(body["lower_bound"], body["median"], body["upper_bound"], strict=True):
        assert all(isinstance(v, float | int) and math.isfinite(v) for v in (low, mid, high))
        assert low <= mid <= high


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_model_answers_the_contract(client: FlaskClient, key: str, model_id: str) -> None:
    response = client.post("/forecast", headers={**bearer(key), "X-Model-Id": model_id}, json=hourly(200))
    assert response.status_code == 200, response.get_data(as_text=True)
    check_forecast(response.get_json(), 12)
    assert response.headers["X-Model-Id"] == model_id
    assert response.get_json()["forecast_timestamps"][0] == "2026-03-09T08:00:00"
    assert "X-Forecast-Warning" not in response.headers


def test_default_model_and_alias(client: FlaskClient, key: str) -> None:
    default = client.post("/forecast", headers=bearer(key), json=hourly(120))
    assert default.headers["X-Model-Id"] == "forecast-model-1"
    alias = client.post("/forecast", headers={**bearer(key), "X-Model-Selector": "forecast-model-2"}, json=hourly(120))
    assert alias.status_code == 200 and alias.headers["X-Model-Id"] == "forecast-model-2"
    both = client.post(
        "/forecast",
        headers={**bearer(key), "X-Model-Id": "forecast-model-3", "X-Model-Selector": "forecast-model-3"},
        json=hourly(120),
    )
    assert both.status_code == 200 and both.headers["X-Model-Id"] == "forecast-model-3"


def test_default_confidence_is_095_and_answers_are_deterministic(client: FlaskClient, key: str) -> None:
    implicit = client.post("/forecast", headers=bearer(key), json=hourly(150)).get_json()
    explicit = client.post("/forecast", headers=bearer(key), json={**hourly(150), "confidence": 0.95}).get_json()
    assert implicit == explicit


def test_higher_confidence_is_never_narrower(client: FlaskClient, key: str) -> None:
    widths = []
    for confidence in (0.5, 0.8, 0.99):
        body = client.post("/forecast", headers=bearer(key), json={**hourly(150), "confidence": confidence}).get_json()
        widths.append([u - lo for lo, u in zip(body["lower_bound"], body["upper_bound"], strict=True)])
    for narrow, wide in zip(widths, widths[1:], strict=False):
        assert all(w >= n - 1e-9 for n, w in zip(narrow, wide, strict=True))


def test_short_history_gets_a_forecast_and_a_warning(client: FlaskClient, key: str) -> None:
    response = client.post("/forecast", headers=bearer(key), json=hourly(10))
    assert response.status_code == 200
    check_forecast(response.get_json(), 12)
    assert "10 points is short for Hours" in response.headers["X-Forecast-Warning"]


MONTH_ENDS_2024 = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


@pytest.mark.parametrize(
    ("frequency", "timestamps", "expected"),
    [
        ("Seconds", [f"2026-01-01T00:00:{s:02d}.250Z" for s in range(0, 40, 2)], "2026-01-01T00:00:40.250Z"),
        ("Minutes", [f"2026-01-01T{m // 60:02d}:{m % 60:02d}:00+05:30" for m in range(0, 100, 5)],
         "2026-01-01T01:40:00+05:30"),
        ("Daily", [f"2026-01-{d:02d}T06:00:00" for d in range(1, 21)], "2026-01-21T06:00:00"),
        ("Weekly", [(datetime(2026, 1, 4) + timedelta(weeks=w)).strftime("%Y-%m-%dT%H:%M:%S") for w in range(20)],
         "2026-05-24T00:00:00"),
        ("Monthly", [f"2024-{m + 1:02d}-{MONTH_ENDS_2024[m]:02d}T00:00:00" for m in range(12)], "2025-01-31T00:00:00"),
        ("Quarterly", [f"{2020 + q // 4}-{3 * (q % 4) + 1:02d}-01T00:00:00" for q in range(12)],
         "2023-01-01T00:00:00"),
        ("Yearly", [f"{2000 + y}-02-29T00:00:00" if (2000 + y) % 4 == 0 else f"{2000 + y}-02-28T00:00:00"
                    for y in range(12)], "2012-02-29T00:00:00"),
    ],
)
def test_forecast_timestamps_continue_each_frequency(
    client: FlaskClient, key: str, frequency: str, timestamps: list[str], expected: str
) -> None:
    body = {
        "series": [{"timestamps": timestamps, "values": [float(i % 4) for i in range(len(timestamps))]}],
        "forecast_horizon": 3,
        "data_frequency": frequency,
        "forecast_frequency": frequency,
    }
    response = client.post("/forecast", headers=bearer(key), json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["forecast_timestamps"][0] == expected
    check_forecast(response.get_json(), 3)


def test_models_lists_the_four_ids_and_is_not_counted(client: FlaskClient, key: str) -> None:
    before = client.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"]
    response = client.get("/models", headers=bearer(key))
    assert response.status_code == 200
    models = response.get_json()["models"]
    assert [m["id"] for m in models] == list(MODEL_IDS)
    assert all(m["description"] for m in models)
    assert client.get("/verify", headers=bearer(key)).get_json()["rateLimit"]["remaining"] == before
    assert client.get("/models").status_code == 401


def test_ready_when_workers_are_up(client: FlaskClient) -> None:
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json()["checks"] == {"database": "ok", "rate_limit_storage": "ok", "forecast_workers": "2/2"}


def _wait_for_workers(pool: WorkerPool, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while pool.ready_workers < count:
        assert time.monotonic() < deadline, "worker was not replaced"
        time.sleep(0.1)


JOB = ForecastWork("forecast-model-2", [float(i % 5) for i in range(50)], 4, 0.9, (5,))


def test_a_forecast_past_its_timeout_frees_the_worker() -> None:
    pool = WorkerPool(workers=1, timeout_seconds=0.001, queue_limit=4)
    pool.start(wait=True)
    try:
        long_job = ForecastWork("forecast-model-1", [float(i % 24) for i in range(50_000)], 48, 0.95, (24, 168))
        with pytest.raises(WorkTimeout):
            pool.submit(long_job)
        pool.timeout_seconds = 30
        _wait_for_workers(pool, 1)
        assert len(pool.submit(JOB).median) == 4
    finally:
        pool.close()


def test_an_idle_worker_that_died_is_replaced_and_the_job_runs() -> None:
    """A job sent to a worker that died while idle never started: it runs on a fresh worker, no 500.
    (A worker that dies during a job answers 500: tests/api/compute/test_pool.py.)"""
    pool = WorkerPool(workers=1, timeout_seconds=30, queue_limit=4)
    pool.start(wait=True)
    try:
        [pid] = pool.worker_pids()
        os.kill(pid, signal.SIGKILL)  # dies before the next job is sent to it
        assert len(pool.submit(JOB).median) == 4
        _wait_for_workers(pool, 1)
        assert pool.worker_pids() != [pid]
    finally:
        pool.close()


def test_pool_errors_reach_the_client_as_500(tmp_path: Path) -> None:
    app = build_app(settings_for(f"sqlite:///{tmp_path / 'k.sqlite3'}"))
    key, _ = new_key(app)
    services_of(app).pool.close()  # as during shutdown: no worker will take the job
    response = app.test_client().post("/forecast", headers=bearer(key), json=hourly(50))
    assert response.status_code == 500
    error = response.get_json()["error"]
    assert error["code"] == "INTERNAL_ERROR" and error["details"]["request_id"] == response.headers["X-Request-Id"]
    assert response.headers["Retry-After"] == "5"
    services_of(app).close()


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_http_answer_equals_the_model_called_in_process(client: FlaskClient, key: str, model_id: str) -> None:
    """What the benchmarks measure in-process is exactly what a client receives (bench/accuracy.py relies on it)."""
    from app.compute.forecast.models import run_forecast
    from app.series.frequencies import seasonal_periods

    body = {**hourly(300), "confidence": 0.8}
    response = client.post("/forecast", headers={**bearer(key), "X-Model-Id": model_id}, json=body)
    values = body["series"][0]["values"]
    expected = run_forecast(model_id, values, 12, 0.8, seasonal_periods("Hours", 1, len(values)))
    got = response.get_json()
    assert (got["median"], got["lower_bound"], got["upper_bound"]) == (expected.median, expected.lower, expected.upper)


def test_saturated_pool_answers_busy_with_retry_after() -> None:
    import threading

    pool = WorkerPool(workers=1, timeout_seconds=30, queue_limit=0)
    pool.start(wait=True)
    try:
        slow = ForecastWork("forecast-model-3", [float(i % 24) + i * 1e-3 for i in range(100_000)], 100, 0.95,
                            (24, 168))
        first = threading.Thread(target=pool.submit, args=(slow,))
        first.start()
        deadline = time.monotonic() + 10
        while pool._admitted == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        from app.compute.pool import PoolBusy

        with pytest.raises(PoolBusy) as busy:
            pool.submit(JOB)
        assert busy.value.retry_after == 5
        first.join(timeout=60)
        assert len(pool.submit(JOB).median) == 4  # admitted again once the first finished
    finally:
        pool.close()
