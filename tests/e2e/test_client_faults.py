"""The client against a real server whose forecasts always time out: a 500 without Retry-After is final,
the "workers saturated" 500 with Retry-After (answered while the timed-out worker is being replaced) is
retried after it, and a Retry-After beyond the retry budget ends the call at once."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from forecast_client import Client, ServerError

from tests.support import Server, cli_in_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_and_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    directory: Path = tmp_path_factory.mktemp("client-faults")
    env = {
        "DATABASE_URL": f"sqlite:///{directory / 'keys.sqlite3'}",
        "FORECAST_WORKERS": "1",
        "FORECAST_QUEUE_LIMIT": "0",
        # Far below any forecast's run time: every forecast is a timeout and costs its worker.
        "FORECAST_TIMEOUT_SECONDS": "0.001",
        "LOG_LEVEL": "INFO",
    }
    cli_in_process("db", "upgrade", env=env)
    key = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "1000", "--json",
                                    env=env).stdout)
    server = Server(env, log_path=directory / "gunicorn.log")
    try:
        server.wait_ready()
        yield server, key["key"]
    finally:
        server.stop()


def series() -> pd.Series:
    index = pd.date_range("2026-01-01", periods=400, freq="h")
    return pd.Series(100 + 10 * np.sin(np.arange(400) * 2 * np.pi / 24), index=index)


def wait_for_worker(url: str) -> None:
    deadline = time.monotonic() + 60
    while httpx.get(url + "/readyz", timeout=5).json().get("checks", {}).get("forecast_workers") != "1/1":
        assert time.monotonic() < deadline, "the replacement forecast worker never became ready"
        time.sleep(0.1)


def test_server_errors_retry_only_when_the_service_says_when(
    server_and_key: tuple[Server, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, key = server_and_key
    caplog.set_level(logging.DEBUG, logger="forecast_client")
    wait_for_worker(server.url)

    # A timed-out forecast: 500 without Retry-After, raised after one attempt.
    with Client(server.url, key, max_retries=3, backoff_base=0.05) as client, pytest.raises(ServerError) as timeout:
        client.forecast(series(), 12)
    assert timeout.value.status_code == 500 and timeout.value.code == "INTERNAL_ERROR"
    assert timeout.value.attempts == 1 and timeout.value.retry_after is None
    assert timeout.value.request_id and timeout.value.request_id == timeout.value.headers["X-Request-Id"]
    assert timeout.value.request_id in server.log()  # the id quoted to the operator finds the log line
    assert not [r for r in caplog.records if r.name == "forecast_client"]

    # The worker is being replaced: "saturated", Retry-After 5, longer than a 2 s budget: raised at once.
    with Client(server.url, key, max_retries=3, retry_budget=2) as client, pytest.raises(ServerError) as busy:
        client.forecast(series(), 12)
    assert busy.value.status_code == 500 and busy.value.retry_after == 5 and busy.value.attempts == 1
    assert not [r for r in caplog.records if r.name == "forecast_client"]

    # With room in the budget the client waits the 5 s and tries again (and then gets a final 500).
    with Client(server.url, key, max_retries=1, retry_budget=30) as client:
        started = time.monotonic()
        with pytest.raises(ServerError) as retried:
            client.forecast(series(), 12)
    assert retried.value.attempts == 2 and time.monotonic() - started >= 5
    retries = [r for r in caplog.records if r.name == "forecast_client"]
    assert len(retries) == 1 and retries[0].levelno == logging.DEBUG
    assert "status 500" in retries[0].getMessage() and retries[0].delay == 5
    assert retries[0].request_id == retried.value.request_id
    assert key not in caplog.text
